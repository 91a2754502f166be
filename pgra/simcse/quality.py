"""An encoder judged by what it retrieves (``pgra eval-encoder``): same-group recall@k and kNN accuracy on dev."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.config import MAX_BATCH, MAX_ITEMS, MAX_TOKENS, SEED_MAX, check_config, option
from ..core.errors import InputError
from ..core.markdown import md_table
from ..retrieval.dense_config import POOLERS
from ..storage.artifacts import iter_jsonl, require_file, write_json
from ..tasks import task_names


@dataclass
class RetrievalEvalConfig:
    """What the retrieval measures read (shared by ``pgra eval-encoder`` and ``train-simcse``)."""

    groups: list[str] = option(default_factory=list, io="in",
                               help="JSONL files of grouped sentences (e.g. data/demo/wiki_topic/{train,dev,test}.jsonl)")
    group_field: str = option("article", help="the group of a JSONL line")
    text_field: str = option("text", help="the sentence of a JSONL line")
    distractors: str = option("", io="in", help="txt corpus (one sentence a line) added to the search space")
    queries: int = option(1000, min=1, max=MAX_ITEMS, help="query sentences drawn (seeded) from the groups with 2+ sentences")
    k: list[int] = option(default_factory=lambda: [1, 5, 10], max=MAX_ITEMS, help="recall@k cut-offs")
    task: str = option("", suggest=task_names, help="task whose dev split the kNN vote classifies")
    data_dir: str = option("data", io="in", help="root of the task data")
    knn_k: int = option(16, min=1, max=MAX_ITEMS, help="training inputs that vote")
    max_length: int = option(128, min=1, max=MAX_TOKENS, help="tokens per encoded sentence")
    batch_size: int = option(128, min=1, max=MAX_BATCH, help="sentences per encoding batch")
    seed: int = option(13, min=0, max=SEED_MAX, help="seed of the query draw")


@dataclass
class EvalEncoderConfig:
    """Everything ``pgra eval-encoder`` needs."""

    encoders: list[str] = option(default_factory=list, help="HF encoders or folders to compare")
    poolers: list[str] = option(default_factory=lambda: ["cls_before_pooler", "mean"], choices=POOLERS,
                                help="poolers each encoder is measured under")
    eval: RetrievalEvalConfig = option(default_factory=RetrievalEvalConfig, help="what is measured")
    out: str = option("", help="JSON file of the results (optional)")
    device: str = option("auto", help="auto, cpu, cuda ...")


def read_groups(paths: list[str], text_field: str, group_field: str) -> tuple[list[str], list[str]]:
    """Texts and groups of every line of the JSONL files (a line without either field is an error naming it)."""
    texts, groups = [], []
    for path in paths:
        source = require_file(path, "groups file", field="groups")
        for lineno, obj in iter_jsonl(source):
            for name in (text_field, group_field):
                if not isinstance(obj.get(name), str) or not obj[name].strip():
                    raise InputError(f"line {lineno} has no text in field '{name}'", path=source, field=name)
            texts.append(obj[text_field])
            groups.append(obj[group_field])
    return texts, groups


def group_recall(queries: np.ndarray, query_rows: list[int], space: np.ndarray, groups: list[str | None],
                 ks: list[int], chunk: int = 256) -> dict[str, float]:
    """recall@k for each k: the share of queries with another sentence of their group among their k nearest."""
    top = max(ks)
    found = np.zeros((len(query_rows), len(ks)), dtype=bool)
    group_ids = {g: i for i, g in enumerate(dict.fromkeys(g for g in groups if g is not None))}
    codes = np.array([group_ids[g] if g is not None else -1 for g in groups])
    for start in range(0, len(query_rows), chunk):
        rows = query_rows[start:start + chunk]
        sims = queries[start:start + chunk] @ space.T
        sims[np.arange(len(rows)), rows] = -np.inf  # never itself
        k = min(top, space.shape[0] - 1)
        best = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        order = np.take_along_axis(sims, best, axis=1).argsort(axis=1)[:, ::-1]
        best = np.take_along_axis(best, order, axis=1)
        same = codes[best] == codes[np.asarray(rows)][:, None]
        for j, cut in enumerate(ks):
            found[start:start + len(rows), j] = same[:, :cut].any(axis=1)
    return {f"recall@{cut}": float(found[:, j].mean()) for j, cut in enumerate(ks)}


def knn_accuracy(train: np.ndarray, train_labels: list[str], train_texts: list[str], dev: np.ndarray,
                 dev_labels: list[str], dev_texts: list[str], k: int, task) -> float:
    """Accuracy of the k nearest training inputs' majority label (never an identical text; ties: the nearest voter)."""
    from ..methods.knn_vote import vote

    sims = dev @ train.T
    correct = 0
    for i, row in enumerate(sims):
        order = np.argsort(-row, kind="stable")
        voters = [train_labels[j] for j in order if train_texts[j].strip() != dev_texts[i].strip()][:k]
        correct += bool(voters) and vote(task, voters)[0] == dev_labels[i]
    return correct / len(dev_labels) if dev_labels else float("nan")


@dataclass
class EvalInputs:
    """What is searched and classified: grouped sentences (None: a distractor), query rows, train and dev inputs."""

    texts: list[str]
    groups: list[str | None]
    query_rows: list[int]
    task: Any = None
    train: list = field(default_factory=list)
    dev: list = field(default_factory=list)


def read_inputs(cfg: RetrievalEvalConfig) -> EvalInputs:
    if not cfg.groups and not cfg.task:
        raise InputError("nothing to measure: give groups files (eval.groups) or a task (eval.task)", field="groups")
    texts, groups = read_groups(cfg.groups, cfg.text_field, cfg.group_field)
    members: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    candidates = [i for i, g in enumerate(groups) if len(members[g]) > 1]
    rng = random.Random(cfg.seed)
    query_rows = sorted(rng.sample(candidates, min(cfg.queries, len(candidates))))
    all_groups: list[str | None] = list(groups)
    if cfg.distractors:
        source = require_file(cfg.distractors, "distractor corpus", field="distractors")
        extra = [line for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
        texts, all_groups = texts + extra, all_groups + [None] * len(extra)
    inputs = EvalInputs(texts, all_groups, query_rows)
    if cfg.task:
        from ..tasks import get_task, load_task

        inputs.task = get_task(cfg.task)
        data = load_task(inputs.task, cfg.data_dir, splits=("train", "dev"))
        inputs.train, inputs.dev = data["train"], data["dev"]
    return inputs


def measure(encoder: str, pooler: str, cfg: RetrievalEvalConfig, inputs: EvalInputs | None = None,
            device: str = "auto") -> dict[str, Any]:
    """Same-group recall@k (and kNN label accuracy with a task) of ``encoder`` under ``pooler``."""
    from ..retrieval.encoder import DenseEncoder

    check_config(cfg)
    inputs = inputs or read_inputs(cfg)
    enc = DenseEncoder(encoder, pooler=pooler, max_length=cfg.max_length, batch_size=cfg.batch_size,
                       device=None if device == "auto" else device)
    result: dict[str, Any] = {"encoder": encoder, "pooler": pooler}
    if inputs.query_rows:
        space = enc.encode(inputs.texts)
        result.update(group_recall(space[inputs.query_rows], inputs.query_rows, space, inputs.groups,
                                   sorted(set(cfg.k))))
        result.update(queries=len(inputs.query_rows), search_space=len(inputs.texts),
                      groups=len({g for g in inputs.groups if g is not None}))
    if inputs.task is not None:
        train_texts = [x.text for x in inputs.train]
        dev_texts = [x.text for x in inputs.dev]
        result["knn_accuracy"] = knn_accuracy(enc.encode(train_texts), [str(x.label) for x in inputs.train],
                                              train_texts, enc.encode(dev_texts), [str(x.label) for x in inputs.dev],
                                              dev_texts, cfg.knn_k, inputs.task)
        result.update(task=inputs.task.name, knn_k=cfg.knn_k, dev_inputs=len(dev_texts))
    return result


def compare_encoders(cfg: EvalEncoderConfig) -> list[dict[str, Any]]:
    """Every encoder under every pooler; writes ``cfg.out`` (JSON) when given."""
    check_config(cfg)
    if not cfg.encoders:
        raise InputError("no encoders given (--encoders)", field="encoders")
    if not cfg.poolers:
        raise InputError("no poolers given (--poolers)", field="poolers")
    inputs = read_inputs(cfg.eval)
    rows = [measure(e, p, cfg.eval, inputs, cfg.device) for e in cfg.encoders for p in cfg.poolers]
    if cfg.out:
        from ..core.config import to_dict

        write_json(Path(cfg.out), {"results": rows, "config": to_dict(cfg)})
    return rows


def format_rows(rows: list[dict[str, Any]]) -> str:
    """A markdown table of :func:`measure` results."""
    recall = sorted({k for r in rows for k in r if k.startswith("recall@")}, key=lambda k: int(k.split("@")[1]))
    knn = any("knn_accuracy" in r for r in rows)
    head = ["encoder", "pooler", *recall] + ([f"kNN accuracy (k={rows[0].get('knn_k')})"] if knn else [])
    cells = [[r["encoder"], r["pooler"], *(f"{100 * r[k]:.1f}" for k in recall),
              *([f"{100 * r['knn_accuracy']:.1f}" if "knn_accuracy" in r else "–"] if knn else [])] for r in rows]
    return "\n".join(md_table(head, cells))


__all__ = ["EvalEncoderConfig", "RetrievalEvalConfig", "compare_encoders", "format_rows", "group_recall",
           "knn_accuracy", "measure", "read_groups", "read_inputs"]
