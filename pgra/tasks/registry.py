"""The task registry: the paper's eight tasks, the offline demo task, and custom tasks from YAML files."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ..core.config import from_dict, load_yaml
from ..core.errors import InputError, StaleArtifactError
from .spec import DataSpec, TaskSpec

_SENTIMENT = "Does the following sentence have a positive or negative sentiment?\n{text}"
_BINARY_SENTIMENT = {"demo_words": {"0": "negative", "1": "positive"},
                     "reader_words": {"0": "terrible", "1": "great"}}


def _lmbff(folder: str, layout: str, files: dict[str, str]) -> DataSpec:
    return DataSpec(format="lmbff", path=f"original/{folder}", lmbff_layout=layout, files=files)


_CSV_FILES = {"train": "train.csv", "test": "test.csv"}

BUILTIN: dict[str, TaskSpec] = {}


def _register(spec: TaskSpec) -> None:
    BUILTIN[spec.name] = spec


_register(TaskSpec(
    name="sst2", labels=["0", "1"], rerank_template=_SENTIMENT, **_BINARY_SENTIMENT,
    description="SST-2 binary movie-review sentiment (LM-BFF files; dev.tsv, 872 sentences, is the test set)",
    data=_lmbff("SST-2", "sst2_tsv", {"train": "train.tsv", "test": "dev.tsv"})))
_register(TaskSpec(
    name="sst5", labels=["0", "1", "2", "3", "4"],
    rerank_template="What sentiment does this sentence have? terrible, bad, okay, good or great\n{text}",
    demo_words={"0": "terrible", "1": "bad", "2": "okay", "3": "good", "4": "great"},
    reader_words={"0": "terrible", "1": "bad", "2": "okay", "3": "good", "4": "great"},
    description="SST-5 five-way movie-review sentiment",
    data=_lmbff("sst-5", "csv", {"train": "train.csv", "dev": "dev.csv", "test": "test.csv"})))
_register(TaskSpec(
    name="cola", labels=["0", "1"],
    rerank_template='The following sentence is either "acceptable", meaning it is grammatically correct and makes '
                    'sense, or "unacceptable". Which is it?\n{text}',
    demo_words={"0": "unacceptable", "1": "acceptable"}, reader_words={"0": "incorrect", "1": "correct"},
    metric="mcc", description="CoLA grammatical acceptability (Matthews correlation; dev.tsv is the test set)",
    data=_lmbff("CoLA", "cola_tsv", {"train": "train.tsv", "test": "dev.tsv"})))
_register(TaskSpec(
    name="trec", labels=["0", "1", "2", "3", "4", "5"],
    rerank_template="Which category best describes the following question: {text} \n\nChoose from the following "
                    "list: \nAbbreviation, Entity, Description, Person, Location, Quantity",
    demo_words={"0": "Description", "1": "Entity", "2": "Abbreviation", "3": "Human", "4": "Location",
                "5": "Number"},
    reader_words={"0": "Description", "1": "Entity", "2": "Expression", "3": "Human", "4": "Location",
                  "5": "Number"},
    reader_template="{evidence} {mask} : {text}",
    description="TREC six-way question classification", data=_lmbff("trec", "csv", _CSV_FILES)))
for _name, _what in (("cr", "CR customer-review sentiment"), ("mr", "MR movie-review sentiment"),
                     ("mpqa", "MPQA opinion polarity")):
    _register(TaskSpec(name=_name, labels=["0", "1"], rerank_template=_SENTIMENT, **_BINARY_SENTIMENT,
                       description=_what, data=_lmbff(_name, "csv", _CSV_FILES)))
_register(TaskSpec(
    name="subj", labels=["0", "1"], rerank_template="Is this a subjective or objective description?\n{text}",
    demo_words={"0": "subjective", "1": "objective"}, reader_words={"0": "subjective", "1": "objective"},
    description="Subj subjectivity", data=_lmbff("subj", "csv", _CSV_FILES)))

# The offline demo task: topic of a Wikipedia summary sentence (prepared by `pgra prepare-demo`).
WIKI_TOPICS = {
    "People": "people", "Biology and health sciences": "biology", "Geography": "geography",
    "Physical sciences": "physics", "Society and social sciences": "society", "Arts": "arts",
    "Technology": "technology", "History": "history", "Everyday life": "life",
    "Philosophy and religion": "religion", "Mathematics": "mathematics",
}
_register(TaskSpec(
    name="wiki_topic", labels=list(WIKI_TOPICS),
    rerank_template="Which topic is this sentence about: " + ", ".join(list(WIKI_TOPICS.values())[:-1])
                    + " or " + list(WIKI_TOPICS.values())[-1] + "?\n{text}",
    demo_words=dict(WIKI_TOPICS), reader_words=dict(WIKI_TOPICS),
    reader_template="{evidence} {text} This is about {mask} .",
    description="Topic of a sentence from a Wikipedia article summary (offline demo task; 11 topics)",
    data=DataSpec(format="jsonl", path="demo/wiki_topic",
                  files={"train": "train.jsonl", "dev": "dev.jsonl", "test": "test.jsonl"},
                  id_column="id")))

ALIASES = {"sst-2": "sst2", "sst-5": "sst5", "CoLA": "cola", "SST-2": "sst2", "SST-5": "sst5"}


def task_from_yaml(path: str | Path) -> TaskSpec:
    """A custom task described in one YAML file (see docs/tasks.md "Custom tasks")."""
    path = Path(path)
    data: dict[str, Any] = load_yaml(path)
    if "name" not in data:
        data["name"] = path.stem
    data["source"] = str(path)
    spec = from_dict(TaskSpec, data, source=str(path))
    if spec.data.path and not Path(spec.data.path).is_absolute() and spec.data.format != "hf":
        local = path.parent / spec.data.path
        if local.exists():
            spec.data.path = str(local.resolve())
    return spec


def get_task(name_or_path: str) -> TaskSpec:
    """A task by registered name (case-insensitive, LM-BFF folder names accepted) or by YAML file path."""
    if name_or_path.endswith((".yaml", ".yml")) or Path(name_or_path).is_file():
        return task_from_yaml(name_or_path)
    key = ALIASES.get(name_or_path, name_or_path.lower())
    if key not in BUILTIN:
        import difflib

        close = difflib.get_close_matches(key, list(BUILTIN), n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise InputError(f"unknown task '{name_or_path}'.{hint} Registered: {', '.join(BUILTIN)}; "
                         "or pass the path of a task YAML file", field="task")
    return copy.deepcopy(BUILTIN[key])


def task_from_manifest(manifest: dict[str, Any], source: str | Path, requested: str = "") -> TaskSpec:
    """The task an artifact records in its manifest; ``requested`` (a name or YAML) must be that task."""
    recorded = from_dict(TaskSpec, manifest["task"], source=str(source))
    if not requested:
        return recorded
    task = get_task(requested)
    if task.name != recorded.name:
        raise StaleArtifactError(f"{source} holds data of task '{recorded.name}', not '{task.name}'")
    return task


def task_names() -> list[str]:
    """The registered tasks' names (a config's suggestions: a task YAML path is accepted too)."""
    return list(BUILTIN)


def list_tasks() -> list[TaskSpec]:
    """The registered tasks (the paper's eight and the offline demo's ``wiki_topic``)."""
    return list(BUILTIN.values())
