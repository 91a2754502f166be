"""The model card of an export (``README.md`` in the Hugging Face Hub's format, :func:`model_card`) and the names an
export shows instead of this machine's paths (:func:`portable`, :func:`display_name`, :func:`hub_id`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import InputError, shorten
from ..core.markdown import md_code, md_fence, md_row, md_table, md_text
from ..rerank.stage import FULL_SEARCH_KIND
from ..results.predictions import read_cell
from ..runtime.cost import finite_number
from ..storage.artifacts import read_json_object, read_manifest
from .distribution import PREDICT, install_lines, pinned

MAX_TEXT = 4096  # characters of a path, hub id or fingerprint in export.json
REDO = "(edited by hand? export the run again)"
PROMPT_GUIDED = "prompt-guided reranking"  # the title of the prompt-guided reranker's stage (Stage.carried)

# what a manifest holds that is the task's or the corpus's content, never a path of this machine: kept as it is
CONTENT_KEYS = frozenset({"labels", "demo_words", "reader_words", "label_map", "rerank_template", "reader_template",
                          "description", "instruction", "prompt_prefix", "ids", "demonstrations", "texts"})

# a metric of metrics.json as the Hub's model-index names it (https://hf.co/metrics), and its title
HUB_METRICS = {"accuracy": ("accuracy", "Accuracy"), "mcc": ("matthews_correlation", "Matthews correlation"),
               "macro_f1": ("f1", "Macro F1")}


def portable(value: Any) -> Any:
    """``value`` with this machine's absolute paths by :func:`display_name` (:data:`CONTENT_KEYS` kept)."""
    if isinstance(value, dict):
        return {k: v if k in CONTENT_KEYS or (k == "excluded" and isinstance(v, list)) else portable(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v) for v in value]
    if isinstance(value, str) and is_local_path(value):
        return display_name(value)
    return value


def is_local_path(text: str) -> bool:
    """Whether ``text`` is an absolute path (or one from the home folder): it names this machine's folders."""
    return ("\n" not in text and 0 < len(text) <= MAX_TEXT
            and (text.startswith(("/", "~")) or re.match(r"[A-Za-z]:[\\/]", text) is not None))


def is_text(value: Any, limit: int = MAX_TEXT) -> bool:
    """Whether ``value`` is a non-empty string of at most ``limit`` characters without NUL."""
    return isinstance(value, str) and 0 < len(value) <= limit and "\x00" not in value


def display_name(name: str) -> str:
    """How an export shows ``name``: a Hugging Face cache snapshot by its Hub id, another absolute path by its last
    part (or "(a local folder)"), a Hub id or relative path as it is."""
    if not is_local_path(name):
        return name
    parts = [p for p in name.replace("\\", "/").split("/") if p]
    for i, part in enumerate(parts):
        if part.startswith("models--") and i + 2 < len(parts) and parts[i + 1] == "snapshots":
            return part[len("models--"):].replace("--", "/")
    last = parts[-1] if parts else ""
    return last if last not in ("", "~", ".", "..") and not last.endswith(":") else "(a local folder)"


def hub_id(name: Any) -> str | None:
    """``name`` when it is a Hugging Face Hub id (or a Hub cache snapshot's path: its id), else None."""
    if not is_text(name) or "\n" in name:
        return None
    if is_local_path(name):
        shown = display_name(name)
        return shown if "/" in shown and "models--" in name else None
    if name.startswith(".") or name.count("/") > 1 or Path(name).exists() or \
            ("/" in name and Path(name.split("/", 1)[0]).is_dir()):
        return None
    try:
        from huggingface_hub.utils import validate_repo_id

        validate_repo_id(name)
    except (ImportError, ValueError):  # no huggingface_hub, or not an id (HFValidationError is a ValueError)
        return None
    return name


def model_card(run: Path, spec: dict[str, Any], reader: dict[str, Any], name: str = "",
               rerank_config: dict[str, Any] | None = None, no_wheel: str = "the card was written without an export") \
        -> str:
    """``README.md`` in the Hub's model-card format, as sentence-transformers writes one: the Hub's YAML metadata,
    task and labels, results per seed, data, pipeline, every setting, install and load lines (``no_wheel``: why no
    wheel is carried), citation and license; no absolute path of this machine (:func:`display_name`)."""
    task = reader["task"]
    metrics = _read_metrics(run / "metrics.json")
    metric = metrics.get("metric", task.get("metric", "accuracy"))
    cfg = reader.get("config") if isinstance(reader.get("config"), dict) else {}
    kind, second = _kind(spec)
    name = name or f"{task['name']}-" + re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-")
    model = reader.get("model", cfg.get("model"))
    lines = ["---", _front_matter(task, metric, metrics, name, model, spec).rstrip("\n"), "---", "",
             f"# {md_text(task['name'])}: a {kind} reader exported by pgra {spec['pgra']}", "",
             "A Fusion-in-Decoder reader that classifies a text from the text and the evidence sentences a "
             "first-stage retriever" + (" and a prompt-guided LM reranker" if second == PROMPT_GUIDED else
                                         f" and a second stage ({second})" if second else "") +
             " find for it in an external corpus (PGRA, Guo et al. 2023).", "",
             "## Task and labels", "", f"Task {md_code(task['name'])}, metric {md_text(metric)}.", "",
             *md_table(["label", "reader word"], ([lab, task.get("reader_words", {}).get(lab, "")]
                                                  for lab in task["labels"])), "",
             *_card_results(run, metric, metrics, cfg), *_card_data(spec, task), *_card_pipeline(spec, second),
             f"- reader: `{display_name(str(model))}`, {spec['n_passages']} passages per input, "
             f"{reader.get('steps', '?')} steps (best {reader.get('best_step', '?')})", "",
             "## Settings", "", "Every setting of the run, whole (paths by their folder's name):", "",
             *md_fence(yaml.safe_dump(_settings(spec, cfg, rerank_config), sort_keys=True,
                                      allow_unicode=True).rstrip("\n"), "yaml"), "",
             "## Use", "", "```bash", *install_lines(spec.get("wheel"), pinned(reader.get("versions")), no_wheel),
             PREDICT + _load_hint(spec, cli=True), "```", "", *_card_use(spec, name)]
    return "\n".join(lines)


def _card_results(run: Path, metric: str, metrics: dict[str, Any], cfg: dict[str, Any]) -> list[str]:
    """The card's results: a row per seed and split (this run's and its sibling seeds')."""
    lines = ["## Results", "", *md_table(["seed", "split", metric, "examples"], [])]
    for seed, results in _seed_results(run, metric, metrics):
        lines += [md_row([seed, split, f"{100 * r[metric]:.1f}", r.get("examples", "")])
                  for split, r in results.items() if metric in r]
    return [*lines, "", "This folder holds the reader of seed " + str(cfg.get("seed", "?")) + "; the other rows are "
            "the same experiment's other seeds where they were found beside it.", ""]


def _card_data(spec: dict[str, Any], task: dict[str, Any]) -> list[str]:
    """The card's data and corpus: the corpus, the first stage, where the index is, the task's data."""
    lines, ix, cand = ["## Data and corpus", ""], spec["index"], spec.get("candidates") or {}
    if ix:
        encoder = ix.get("encoder")
        where = ("copied into index/" if ix["copied"] else
                 "not copied: pass `index=` when loading elsewhere (a copy of it: the same corpus)")
        if encoder and ix.get("copied_encoder"):
            where += ", its encoder into encoder/"
        elif encoder and hub_id(encoder):
            where += ", its encoder from the Hub"
        elif encoder:
            where += "; its encoder not copied: pass `encoder=` when loading elsewhere"
        lines += [f"- corpus: {ix.get('corpus_size')} sentences, content SHA-256 `{ix.get('corpus_content_sha256')}`",
                  f"- first stage: {ix.get('retriever')}" + (f", encoder `{display_name(str(encoder))}` "
                                                           f"({ix.get('pooler')})" if encoder else "")
                  + f", top k={spec['k']}", f"- index: {where}"]
    if cand.get("counts"):
        lines.append("- task data: " + ", ".join(f"{s} {n}" for s, n in cand["counts"].items()) + " inputs")
    if datasets := _datasets(task, cand):
        lines.append("- task data from the Hub: " + ", ".join(f"`{d}`" for d in datasets))
    provenance = cand.get("data_provenance")
    if isinstance(provenance, dict):
        lines += [f"- {split}: {_provenance_line(p)}" for split, p in provenance.items() if isinstance(p, dict)]
    return [*lines, ""]


def _card_pipeline(spec: dict[str, Any], second: str) -> list[str]:
    """The card's evidence pipeline up to the reader: the second stage, what it reads and keeps."""
    lines, r = ["## Evidence pipeline", ""], spec["reranked"]
    if r:
        scorer = (f"`{display_name(str(r['lm']))}` ({second}" + (", copied into lm/)" if r["copied_lm"] else
                  ", not copied: pass `lm=` when loading elsewhere)")) if r["lm"] else second
        reads = "the whole corpus" if r.get("store") else f"the first {r['k']} candidates" if r["k"] else \
            "every candidate"
        lines.append(f"- reranker: {scorer} re-scores {reads}, keeps d={r['top_d']}")
        if r.get("store"):
            lines.append("- the corpus pass's embeddings it searches: " + (
                "copied into store/" if r["store"]["copied"] else
                "not copied (predict where the run was made, or export it with --copy-index to carry them)"))
    return lines


def _card_use(spec: dict[str, Any], name: str) -> list[str]:
    """The card's end: loading the folder from Python, the citation and the license."""
    return ["```python", "import pgra", "", f"pipe = pgra.Pipeline.load({json.dumps(name)})" + _load_hint(spec),
            'out = pipe.predict(["A text to classify."])[0]', 'print(out["prediction"], out["scores"])'
            '  # the label, a probability per label; out["evidence"]: the sentences read', "```", "",
            "`Pipeline.load` takes the folder, or its Hugging Face Hub repository id (`USER/NAME`, downloaded with "
            "`huggingface_hub`); `pgra predict --run FOLDER --text \"...\"` does the same on the command line.", "",
            "## Citation", "", "```bibtex", "@inproceedings{guo-etal-2023-prompt,",
            "  title     = {Prompt-Guided Retrieval Augmentation for Non-Knowledge-Intensive Tasks},",
            "  author    = {Guo, Zhicheng and Cheng, Sijie and Wang, Yile and Li, Peng and Liu, Yang},",
            "  booktitle = {Findings of the Association for Computational Linguistics: ACL 2023},",
            "  year      = {2023}", "}", "```", "", "## License", "",
            "pgra is Apache-2.0. The weights inherit the licenses of the models and data they were trained from "
            "(the reader's starting model, the task data, the corpus).", ""]


def _kind(spec: dict[str, Any]) -> tuple[str, str]:
    """The exported run's kind as the card names it (``PGRA``, ``FiD + <reranker>``, ...) and its stage's title."""
    if not (r := spec["reranked"]):
        return ("FiD" if spec["n_passages"] else "no-retrieval"), ""
    title = r.get("title") or PROMPT_GUIDED  # exports before any other stage's were the prompt-guided reranker's
    if r.get("kind") == FULL_SEARCH_KIND:
        return "PGRA (whole corpus)", title
    return ("PGRA" if title == PROMPT_GUIDED else f"FiD + {title}"), title


def _front_matter(task: dict[str, Any], metric: str, metrics: dict[str, Any], name: str, model: Any,
                  spec: dict[str, Any]) -> str:
    """The card's YAML metadata (sentence-transformers' keys): a YAML document, whatever the names hold."""
    hub_metric, title = HUB_METRICS.get(metric, (metric, metric))
    tags = ["pgra", "fusion-in-decoder", "retrieval-augmented", "text-classification"]
    if spec["reranked"] and _kind(spec)[0].startswith("PGRA"):
        tags.append("prompt-guided-reranking")
    front: dict[str, Any] = {"library_name": "pgra", "license": "apache-2.0", "pipeline_tag": "text-classification",
                             "tags": tags}
    if base := hub_id(model):
        front["base_model"] = base
    if datasets := _datasets(task, spec.get("candidates") or {}):
        front["datasets"] = datasets
    front["metrics"] = [hub_metric]
    test = (metrics.get("results") or {}).get("test") or {}
    if metric in test:
        dataset = {"name": task["name"], "type": datasets[0] if datasets else task["name"], "split": "test"}
        front["model-index"] = [{"name": name, "results": [{
            "task": {"type": "text-classification", "name": "Text Classification"}, "dataset": dataset,
            "metrics": [{"type": hub_metric, "value": round(float(test[metric]), 6), "name": f"Test {title}"}]}]}]
    return yaml.safe_dump(front, sort_keys=False, allow_unicode=True)


def _datasets(task: dict[str, Any], cand: dict[str, Any]) -> list[str]:
    """The task's data as Hub dataset ids: a task read with ``format: hf`` from a Hub id (not a local folder)."""
    data = task.get("data") if isinstance(task.get("data"), dict) else {}
    found = hub_id(data.get("path")) if data.get("format") == "hf" else None
    provenance = cand.get("data_provenance") if isinstance(cand.get("data_provenance"), dict) else {}
    local = any(isinstance(p, dict) and (p.get("sha256") or is_local_path(str(p.get("source", ""))))
                for p in provenance.values())
    return [found] if found and not local else []


def _provenance_line(p: dict[str, Any]) -> str:
    """One split's data provenance for the card: its source's name, rows and hash, or how it was carved."""
    if p.get("carved_from"):
        return (f"{p.get('rows', '?')} rows carved from {p['carved_from']} (fraction {p.get('fraction', '?')}, "
                f"seed {p.get('seed', '?')})")
    said = f"`{display_name(str(p.get('source', '?')))}`, {p.get('rows', '?')} rows"
    if p.get("rows_after_carving") is not None:
        said += f" ({p['rows_after_carving']} after carving dev)"
    return said + (f", SHA-256 `{p['sha256']}`" if p.get("sha256") else "")


def _settings(spec: dict[str, Any], cfg: dict[str, Any], rerank_config: dict[str, Any] | None) -> dict[str, Any]:
    """Every setting of the run, :func:`portable`: the first stage's, the reranking's and the reader's."""
    out: dict[str, Any] = {}
    if ix := spec["index"]:
        out["retrieval"] = {k: ix.get(k) for k in ("retriever", "encoder", "pooler", "corpus_size",
                                                   "corpus_content_sha256", "build_key") if ix.get(k) is not None}
        out["retrieval"].update(k=spec["k"], exclude_query_text=spec["exclude_query_text"],
                                excluded_ids=len(spec["excluded"]))
    if spec["reranked"]:
        r = spec["reranked"]
        out["reranking"] = {**{k: v for k, v in (rerank_config or {}).items() if k not in ("out", "candidates")},
                            "lm": r["lm"], "lm_fingerprint": r.get("lm_fingerprint"), "k": r["k"],
                            "top_d": r["top_d"]}
    out["reader"] = {k: cfg[k] for k in sorted(cfg) if k not in ("data", "out")}
    return portable(json.loads(json.dumps(out, default=str)))  # as JSON holds it: what YAML dumps safely


def _load_hint(spec: dict[str, Any], cli: bool = False) -> str:
    """What ``Pipeline.load`` (``cli``: ``pgra predict``) needs elsewhere: the parts the export did not copy."""
    ix, r = spec["index"], spec["reranked"]
    need = []
    if ix and not ix["copied"]:
        need.append("index")
    if ix and ix.get("encoder") and not ix.get("copied_encoder") and not hub_id(ix["encoder"]):
        need.append("encoder")
    if r and r["lm"] and not r["copied_lm"] and not hub_id(r["lm"]):
        need.append("lm")
    said = " ".join(f"--{n} PATH" for n in need) if cli else ", ".join(f'{n}="..."' for n in need)
    return f"  # elsewhere: {said} (local copies)" if need else ""


def _read_metrics(path: Path) -> dict[str, Any]:
    """The run's ``metrics.json``, checked where the model card reads it (an InputError names the field)."""
    metrics = read_json_object(path)
    if not isinstance(metrics.get("metric", ""), str):
        raise InputError(f"must be a metric name, got {shorten(metrics['metric'])} {REDO}", path=path,
                         field="metric")
    _check_results(path, metrics.get("results", {}), metrics.get("metric"))
    return metrics


def _check_results(path: Path, results: Any, metric: str | None) -> None:
    """``results`` maps each split to an object whose ``metric`` (when there) is a finite number."""
    if not (isinstance(results, dict) and all(isinstance(r, dict) for r in results.values())):
        raise InputError(f"must map each split to its results, got {shorten(results)} {REDO}", path=path,
                         field="results")
    for split, r in results.items():
        value = r.get(metric) if metric else None
        if metric in r and not finite_number(value):
            raise InputError(f"must be a number, got {shorten(value)} {REDO}", path=path,
                             field=f"results.{split}.{metric}")


def _seed_results(run: Path, metric: str, metrics: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]]:
    """(seed, results) of this run and of its sibling seeds' cells, each checked."""
    cells = sorted(run.parent.glob("seed-*/cell.json")) if run.name.startswith("seed-") else []
    found = []
    for cell in cells:
        rec = read_cell(cell)
        _check_results(cell, rec["results"], metric)
        found.append((rec["seed"], rec["results"]))
    if not found:
        cfg = read_manifest(run, "reader").get("config")
        found = [((cfg if isinstance(cfg, dict) else {}).get("seed"), metrics.get("results", {}))]
    return found



__all__ = ["CONTENT_KEYS", "MAX_TEXT", "PROMPT_GUIDED", "REDO", "display_name", "hub_id", "is_local_path", "is_text",
           "model_card", "portable"]
