"""TaskSpec: one definition of a classification task, used by every stage."""

from __future__ import annotations

import string
from dataclasses import dataclass, field

from ..core.config import SEED_MAX, check_path_segments, option
from ..core.errors import InputError

METRICS = ("accuracy", "mcc", "macro_f1")
# Reader input formats (the reader substitutes its own sentinel for {mask}: <extra_id_0> for T5).
READER_FORMATS = {
    # the paper's intended format; TREC overrides it in its spec
    "intended": "{evidence} {text} This is {mask} .",
    # what the released code fed for every task (a bug, kept for parity)
    "released": "{evidence} {text} ? {mask} , ",
    # Fusion-in-Decoder's question/context format
    "fid": "question: {text} {mask} context: {evidence}",
}


@dataclass
class DataSpec:
    """Where a task's data lives and how to read it (``path``: from the task YAML's folder, else the data root)."""

    format: str = "jsonl"
    path: str = ""
    files: dict[str, str] = field(default_factory=dict)  # split -> file name (relative to path)
    lmbff_layout: str = ""  # sst2_tsv (header sentence,label) | cola_tsv (no header) | csv (label,sentence)
    text_column: str = "text"
    label_column: str = "label"
    id_column: str = ""  # empty: ids are "<split>-<row>"
    hf_name: str = ""  # dataset config name for format hf
    hf_splits: dict[str, str] = field(default_factory=dict)  # our split -> the dataset's split name
    label_map: dict[str, str] = field(default_factory=dict)  # raw value in the data -> task label
    dev_fraction: float = option(0.1, above=0, max=0.5,
                                 help="carved from train (seeded, stratified) when there is no dev split")
    dev_seed: int = option(13, min=0, max=SEED_MAX, help="seed of the dev split carved from train")


@dataclass
class TaskSpec:
    """Labels, prompts, label words (reranker demonstrations' and reader targets'), reader format and metric."""

    name: str = option(path_segment=True, help="the task's folder in an experiment")
    labels: list[str]
    rerank_template: str
    demo_words: dict[str, str]
    reader_words: dict[str, str]
    reader_template: str = READER_FORMATS["intended"]
    metric: str = "accuracy"
    description: str = ""
    data: DataSpec = field(default_factory=DataSpec)
    source: str = "builtin"  # where the spec came from (builtin or the YAML path)

    def __post_init__(self) -> None:
        self.labels = [str(x) for x in self.labels]
        self.demo_words = {str(k): v for k, v in self.demo_words.items()}
        self.reader_words = {str(k): v for k, v in self.reader_words.items()}
        self.validate()

    def validate(self) -> None:
        where = self.source if self.source != "builtin" else None
        check_path_segments(self.name, "name", where)  # it names the task's folder in an experiment
        if not self.labels:
            raise InputError(f"task '{self.name}' has no labels", path=where, field="labels")
        if len(set(self.labels)) != len(self.labels):
            raise InputError(f"task '{self.name}' lists a label twice: {self.labels}", path=where, field="labels")
        _check_placeholders(self.rerank_template, {"text"}, "rerank_template", where, self.name)
        _check_placeholders(self.reader_template, {"text", "mask"}, "reader_template", where, self.name,
                            optional={"evidence"})
        for fname in ("demo_words", "reader_words"):
            words = getattr(self, fname)
            missing = [lab for lab in self.labels if lab not in words]
            extra = [k for k in words if k not in self.labels]
            if missing or extra:
                raise InputError(f"task '{self.name}': {fname} must give one word per label; missing {missing}, "
                                 f"unknown {extra}", path=where, field=fname)
            if any(not str(w).strip() for w in words.values()):
                raise InputError(f"task '{self.name}': empty label word", path=where, field=fname)
        if len(set(self.reader_words.values())) != len(self.labels):
            raise InputError(f"task '{self.name}': two labels share a reader word", path=where,
                             field="reader_words")
        if self.metric not in METRICS:
            raise InputError(f"task '{self.name}': unknown metric '{self.metric}', use one of {METRICS}",
                             path=where, field="metric")

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    def render(self, text: str) -> str:
        """The reranker template P(text)."""
        return self.rerank_template.replace("{text}", text)

    def reader_input(self, text: str, evidence: str, mask: str, fmt: str | None = None) -> str:
        """The reader's encoder input for one (query, evidence) pair; ``fmt`` picks a READER_FORMATS entry."""
        template = self.reader_template if fmt in (None, "intended") else READER_FORMATS[fmt]
        return template.replace("{evidence}", evidence).replace("{text}", text).replace("{mask}", mask).strip()


def _check_placeholders(template: str, required: set[str], fname: str, where: str | None, task: str,
                        optional: frozenset[str] | set[str] = frozenset()) -> None:
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as e:
        raise InputError(f"task '{task}': malformed template ({e})", path=where, field=fname) from None
    missing = required - names
    unknown = names - required - set(optional)
    if missing:
        raise InputError(f"task '{task}': template has no {', '.join('{' + m + '}' for m in sorted(missing))} "
                         "placeholder", path=where, field=fname)
    if unknown:
        raise InputError(f"task '{task}': unknown placeholder(s) {sorted(unknown)} in template", path=where,
                         field=fname)
