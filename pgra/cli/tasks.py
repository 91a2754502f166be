"""``pgra tasks``: list the registered tasks, show one (`tasks show NAME`), export one (`tasks export NAME`), or
write one's labelled inputs as an evidence pool (`tasks pool NAME`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.config import option
from ..core.errors import InputError
from ..tasks import task_names
from .command import Command


@dataclass
class TasksOptions:
    action: str = option("list", positional=True, choices=("list", "show", "export", "pool"), help="what to do")
    name: str = option("", positional=True, io="in", suggest=task_names,
                       help="registered task name or path of a task YAML file")
    data_dir: str = option("data", io="in", help="root of the task data")
    out: str = option("", help="export: folder to write the splits to; pool: folder of corpus.txt and its labels")
    split: str = option("train", path_segment=True, help="pool: the split whose inputs become the corpus")


def run(opts: TasksOptions) -> None:
    from ..tasks import get_task, list_tasks

    if opts.action == "list":
        for t in list_tasks():
            print(f"{t.name:<11} {len(t.labels)} labels  {t.metric:<9} {t.description}")
        return
    if not opts.name:
        raise InputError(f"`pgra tasks {opts.action}` needs a task name or YAML path", field="name")
    task = get_task(opts.name)
    if opts.action == "show":
        show_task(task, opts.data_dir)
    elif opts.action == "pool":
        write_pool(task, opts.data_dir, opts.split, opts.out)
    else:
        export_task(task, opts.data_dir, opts.out)


def show_task(task: Any, data_dir: str) -> None:
    """Print a task's labels, words, templates and an example reranker prompt."""
    from ..core.errors import PgraError
    from ..lm.prompts import build_prompt
    from ..tasks import load_task

    print(f"task: {task.name}  ({task.description or task.source})")
    print(f"metric: {task.metric}")
    print("labels (value: demonstration word / reader word):")
    for lab in task.labels:
        print(f"  {lab}: {task.demo_words[lab]} / {task.reader_words[lab]}")
    print("\nreranker template P(text):")
    print(task.rerank_template)
    print("\nreader input format:")
    print(task.reader_template)
    try:
        data = load_task(task, data_dir, splits=("train",))
    except PgraError as e:
        print(f"\n(no example prompt: {e})")
        return
    train = data["train"]
    demos, seen = [], set()
    for ex in train:
        if ex.label not in seen:
            demos.append(ex)
            seen.add(ex.label)
        if len(demos) == min(2, task.num_labels):
            break
    query = next((ex for ex in train if ex not in demos), None)
    if query is None:  # train is one example of each label shown (or fewer): no sentence left to classify
        print(f"\n(no example prompt: train has {len(train)} example(s), all shown as demonstrations)")
        return
    print(f"\nexample reranker prompt ({len(demos)} demonstrations from train, then a training sentence):")
    print("-" * 60)
    print(build_prompt(task, demos, query.text))
    print("-" * 60)


def export_task(task: Any, data_dir: str, out: str) -> None:
    """Write a task's splits as interchange JSONL with a manifest."""
    from ..core.config import to_dict
    from ..data.interchange import example_record, write_records
    from ..storage.artifacts import check_disjoint, claim_output, write_manifest
    from ..storage.ownership import claimed
    from ..tasks import load_task, task_paths

    if not out:
        raise InputError("`pgra tasks export` needs --out DIR", field="out")
    check_disjoint({"out": out}, {"name": task_paths(task, data_dir)})  # never onto the task's own data
    claim_output(out, "task-data")
    data = load_task(task, data_dir)
    out_dir = Path(out)
    with claimed(out_dir, "task-data"):  # a folder pgra did not make (a user's own train.jsonl) is refused
        (out_dir / "manifest.json").unlink(missing_ok=True)
        counts = {split: write_records(out_dir / f"{split}.jsonl", (example_record(ex) for ex in examples))
                  for split, examples in data.splits.items()}
        write_manifest(out_dir, {"kind": "task-data", "task": to_dict(task), "counts": counts,
                                 "provenance": data.provenance})
    print(f"exported {task.name} to {out_dir}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


def write_pool(task: Any, data_dir: str, split: str, out: str) -> None:
    """A labelled evidence pool: ``corpus.txt`` (the split's texts, one a line: a corpus like any other, its ids
    the line numbers) and ``corpus.labels.json`` beside it (their labels, which only the consistency analysis
    reads: :func:`pgra.analysis.consistency.labels_sidecar`), with a manifest."""
    from ..analysis.consistency import labels_sidecar
    from ..storage.artifacts import check_disjoint, claim_output, write_json, write_manifest, write_text
    from ..storage.ownership import claimed
    from ..tasks import load_task, task_paths

    if not out:
        raise InputError("`pgra tasks pool` needs --out DIR", field="out")
    check_disjoint({"out": out}, {"name": task_paths(task, data_dir)})
    claim_output(out, "labelled-pool")
    data = load_task(task, data_dir)
    if split not in data.splits:
        raise InputError(f"task '{task.name}' has no split '{split}' (it has {', '.join(data.splits)})", field="split")
    examples = data[split]
    corpus = Path(out) / "corpus.txt"
    with claimed(Path(out), "labelled-pool"):
        (Path(out) / "manifest.json").unlink(missing_ok=True)
        write_text(corpus, "".join(" ".join(ex.text.split()) + "\n" for ex in examples))
        write_json(labels_sidecar(corpus), {"task": task.name, "split": split,
                                            "ids": [ex.id for ex in examples], "labels": [ex.label for ex in examples]})
        write_manifest(Path(out), {"kind": "labelled-pool", "task": task.name, "split": split,
                                   "sentences": len(examples), "provenance": data.provenance.get(split, {})})
    print(f"wrote {len(examples)} {split} inputs of {task.name} to {corpus} (labels: {labels_sidecar(corpus).name})")


COMMAND = Command("tasks", "list tasks; `tasks show NAME`; `tasks export NAME --out DIR`; `tasks pool NAME --out DIR`", f"{__name__}:TasksOptions",
                  run, from_yaml=False)
