"""``pgra export``: a finished reader run as one self-contained folder a colleague loads with
``pgra.Pipeline.load(DIR)`` on another machine.

Layout of ``DIR``::

    export.json              what the pipeline needs besides the reader: the first-stage index (a pointer with its
                             corpus fingerprint, or ``index/``), k, exclusions, the reranking and its LM
    manifest.json            the run's reader manifest; best/ (the reader: safetensors, tokenizer, config),
    metrics.json             and its metrics
    reranked/                the reranker's manifest and demonstrations (a PGRA run)
    index/, lm/              copies of the index and the reranking LM (``--copy-index``, ``--copy-lm``)
    README.md                a model card in the Hugging Face Hub's format

Without the copies the folder records where the index and the LM were and what they held (the corpus's and the
LM files' fingerprints); ``Pipeline.load(DIR, index=..., lm=...)`` points at the colleague's copies, refused when
they hold something else.

Everything is read and checked before anything is written (the run's weights against their headers, its
``fid_config.json``, its metrics and its sibling seeds' ``cell.json``, and every file to copy: a symbolic link out
of what is exported is refused, never followed). The folder is then composed in a temporary folder inside ``DIR``
and moved into place, ``export.json`` last: a failed export leaves no partial folder, and re-running an export
into its own folder replaces it (a folder of any other kind is refused). :func:`read_export` is the one reader of
``export.json``.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .artifacts import (
    MANIFEST,
    parse_json,
    read_json_object,
    read_manifest,
    require_file,
    verify_safetensors,
    write_json,
    write_text,
)
from .errors import InputError, shorten

EXPORT_FILE = "export.json"
EXPORT_KIND = "export"
# what an export writes in its folder (replaced on a re-run); export.json, its completion mark, comes last
WRITTEN = ("best", "reranked", "index", "lm", "metrics.json", "README.md", MANIFEST)
MAX_EXPORT_BYTES = 64 << 20  # export.json (its largest part: the excluded corpus ids)
MAX_TEXT = 4096  # characters of a path, hub id or fingerprint in export.json
MAX_IDS = 5_000_000  # excluded corpus ids
MAX_ID = 1000  # characters of one corpus id
MAX_COUNT = 1_000_000  # n_passages, k, top_d
REDO = "(edited by hand? export the run again)"


@dataclass
class _Plan:
    """Everything an export writes, read and checked before anything is written."""

    run: Path
    spec: dict[str, Any]
    reader: dict[str, Any]
    card: str
    reranked: Path | None
    index: Path | None  # the index folder to copy (--copy-index)
    lm: Path | None  # the LM folder to copy (--copy-lm)


def export_run(run: str | Path, out: str | Path, copy_index: bool = False, copy_lm: bool = False) -> Path:
    """Write ``out`` from the finished reader run ``run`` (see the module's docstring); returns ``out``. An
    ``out`` that is, holds or lies inside ``run`` (the experiment folder), or holds another artifact than an
    export, is refused with an InputError before anything is written; so is a damaged or linked-out run."""
    from .artifacts import check_disjoint
    from .lock import output_lock
    from .ownership import claimed

    run, out = Path(run), Path(out)
    check_disjoint({"out": str(out)}, {"run": str(run)})  # the CLI's own check, here for Python callers too
    plan = _plan(run, copy_index, copy_lm)
    with output_lock(out, "pgra.export_run"):
        _claim_export(out)
        with claimed(out, EXPORT_KIND):
            _write(out, plan)
    return out


def _claim_export(out: Path) -> None:
    """Refuse ``out`` unless it is new, empty or an export pgra wrote (its record says ``export``; its
    ``manifest.json`` is the run's reader manifest, so the record decides): a run, an experiment or any other
    artifact is never replaced."""
    from .artifacts import claim_output
    from .ownership import read_record

    record = read_record(out) if out.is_dir() else None
    if record is None:
        claim_output(out, EXPORT_KIND)
    elif record.get("kind") != EXPORT_KIND:
        raise InputError(f"{out} is a folder pgra wrote as {shorten(record.get('kind'), 60)}, not an export; "
                         "writing there would replace it: choose another output folder", field="out")


def _plan(run: Path, copy_index: bool, copy_lm: bool) -> _Plan:
    """Read and check everything the export of ``run`` writes (nothing is written yet)."""
    from . import __version__
    from .hub import check_no_links_out
    from .provenance import check_run_data, run_data
    from .rerank.core import candidates_of
    from .retrieval.retrieve import read_candidates_manifest, recorded_exclusions

    reader = read_manifest(run, "reader")
    _check_task(run, reader)
    for name in ("best", "metrics.json"):  # refused before its kind is judged: a link is never followed
        check_no_links_out(run / name, run, field="run")
    if not (run / "best").is_dir():
        raise InputError("no best/ reader in the run: not a finished `pgra train` run", path=run, field="run")
    verify_safetensors(run / "best")  # a truncated weights file is never exported (nor uploaded)
    spec: dict[str, Any] = {"kind": EXPORT_KIND, "pgra": __version__, "run": str(run.resolve()),
                            "n_passages": _n_passages(run / "best" / "fid_config.json"), "index": None,
                            "reranked": None}
    reranked = None
    if spec["n_passages"]:
        data = run_data(run, reader)
        check_run_data(run, data, "re-run the experiment (or pgra train) before exporting")
        manifest = read_manifest(data, ("reranked", "candidates"))
        if manifest["kind"] == "reranked":
            if manifest.get("per_query_demonstrations"):
                raise InputError("a reranking with per-query demonstrations refits its selector on the training "
                                 "split at load time, which an export does not carry: export a run whose reranker "
                                 "shows one set of demonstrations", path=data / MANIFEST,
                                 field="per_query_demonstrations")
            check_no_links_out(data / "demonstrations.json", data, field="run")
            reranked, data = data, candidates_of(data, manifest)
            spec["reranked"] = {"lm": manifest["lm"], "lm_fingerprint": manifest["lm_fingerprint"],
                                "copied_lm": copy_lm, "top_d": manifest["top_d"], "k": manifest["k"]}
        cand = read_candidates_manifest(data)
        if not cand.get("index"):
            raise InputError("the run's data was imported (no index): its evidence cannot be retrieved for new "
                             "texts", path=data / MANIFEST, field="index")
        spec["index"] = {**cand["index"], "copied": copy_index}
        spec.update(k=int(cand["k"]), exclude_query_text=bool(cand["config"].get("exclude_query_text")),
                    excluded=sorted(recorded_exclusions(cand, data)), candidates=cand)
    index = _folder_to_copy(spec["index"]["path"], "copy_index", "the index") if copy_index and spec["index"] \
        else None
    lm = _folder_to_copy(spec["reranked"]["lm"], "copy_lm", "the reranking LM") if copy_lm and spec["reranked"] \
        else None
    if lm is not None:
        verify_safetensors(lm)
    return _Plan(run, spec, reader, model_card(run, spec, reader), reranked, index, lm)


def _check_task(run: Path, reader: dict[str, Any]) -> None:
    """The reader manifest's ``task`` has what the model card shows: a name and a list of labels."""
    task = reader.get("task")
    if not (isinstance(task, dict) and isinstance(task.get("name"), str) and isinstance(task.get("labels"), list)
            and isinstance(task.get("reader_words", {}), dict)):
        raise InputError(f"must be a task with a name and a list of labels, got {shorten(task)} {REDO}",
                         path=run / MANIFEST, field="task")


def _n_passages(path: Path) -> int:
    """The reader's passages per input, from its ``fid_config.json`` (an InputError names a missing or bad one)."""
    fid = read_json_object(path)
    value = fid.get("n_passages")
    if "n_passages" not in fid or not _is_count(value, 0, MAX_COUNT):
        said = "missing" if "n_passages" not in fid else f"must be a whole number from 0, got {shorten(value)}"
        raise InputError(f"{said}: not the fid_config.json `pgra train` wrote; train the run again",
                         path=path, field="n_passages")
    return value


def _folder_to_copy(where: Any, field: str, what: str) -> Path:
    """The local folder ``where`` (``--copy-index`` / ``--copy-lm``), resolved, holding no link out of it."""
    from .hub import check_no_links_out

    path = Path(str(where)).expanduser()
    if not path.is_dir():
        raise InputError(f"{what} {shorten(str(where))} is not a folder on this machine (a hub id, or moved?): it "
                         "cannot be copied; export without this option", field=field)
    path = path.resolve()
    check_no_links_out(path, _links_may_reach(path), field=field)
    return path


def _links_may_reach(folder: Path) -> Path:
    """Where links inside ``folder`` may point: the folder itself, or, for a snapshot in the Hugging Face cache
    (``models--ORG--NAME/snapshots/REV``, whose files are links to ``../../blobs/``), that model's cache folder."""
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return folder.parent.parent
    return folder


def _write(out: Path, plan: _Plan) -> None:
    """Compose the export in a temporary folder inside ``out``, then move each part into place, ``export.json``
    last; a failure removes the temporary folder (``out`` keeps what it held before)."""
    stage = Path(tempfile.mkdtemp(prefix=".export.", dir=out))  # a temporary name pgra's next claim drops
    try:
        _compose(stage, plan)
        (out / EXPORT_FILE).unlink(missing_ok=True)  # from here the folder is an unfinished export
        for name in WRITTEN:
            _remove(out / name)
            if (stage / name).exists():
                (stage / name).rename(out / name)
        (stage / EXPORT_FILE).rename(out / EXPORT_FILE)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _compose(stage: Path, plan: _Plan) -> None:
    """Write every part of the export into the empty folder ``stage``."""
    shutil.copytree(plan.run / "best", stage / "best")
    shutil.copy2(plan.run / "metrics.json", stage / "metrics.json")
    if plan.reranked is not None:
        (stage / "reranked").mkdir()
        shutil.copy2(plan.reranked / "demonstrations.json", stage / "reranked" / "demonstrations.json")
        m = read_json_object(plan.reranked / MANIFEST)  # its record of the files kept: the splits stay behind
        if isinstance(m.get("files"), dict):
            m["files"] = {k: v for k, v in m["files"].items() if k == "demonstrations.json"}
        write_json(stage / "reranked" / MANIFEST, m)
    if plan.lm is not None:
        shutil.copytree(plan.lm, stage / "lm")
    if plan.index is not None:
        shutil.copytree(plan.index, stage / "index")
    write_text(stage / "README.md", plan.card)
    write_json(stage / MANIFEST, plan.reader)  # the reader's manifest: Reader.load reads its task and precision
    write_json(stage / EXPORT_FILE, plan.spec)


def _remove(path: Path) -> None:
    """Remove ``path`` (a link itself, never what it points to)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def model_card(run: Path, spec: dict[str, Any], reader: dict[str, Any]) -> str:
    """``README.md`` in the Hub's model-card format: YAML metadata, then task, labels, metrics with seeds, data
    and corpus, the evidence pipeline, the settings, how to load it, citation and license."""
    import json

    task = reader["task"]
    metrics = _read_metrics(run / "metrics.json")
    metric = metrics.get("metric", task.get("metric", "accuracy"))
    cfg = reader.get("config") if isinstance(reader.get("config"), dict) else {}
    seeds = _seed_results(run, metric, metrics)
    lines = ["---", "library_name: pgra", "license: apache-2.0", "pipeline_tag: text-classification",
             "tags:", "- pgra", "- fusion-in-decoder", "- retrieval-augmented", "- text-classification",
             f"metrics:\n- {metric}", "---", "",
             f"# {task['name']}: a {'PGRA' if spec['reranked'] else 'FiD' if spec['n_passages'] else 'no-retrieval'}"
             f" reader exported by pgra {spec['pgra']}", "",
             "A Fusion-in-Decoder reader that classifies a text from the text and the evidence sentences a "
             "first-stage retriever" + (" and a prompt-guided LM reranker" if spec["reranked"] else "") +
             " find for it in an external corpus (PGRA, Guo et al. 2023).", "",
             "## Task and labels", "", f"Task `{task['name']}`, metric {metric}.", "",
             "| label | reader word |", "|---|---|",
             *(f"| {lab} | {task.get('reader_words', {}).get(lab, '')} |" for lab in task["labels"]), "",
             "## Metrics", "", "| seed | split | " + metric + " | examples |", "|---|---|---|---|"]
    for seed, results in seeds:
        lines += [f"| {seed} | {split} | {100 * r[metric]:.1f} | {r.get('examples', '')} |"
                  for split, r in results.items() if metric in r]
    lines += ["", "This folder holds the reader of seed " + str(cfg.get("seed", "?")) + "; the other rows are the "
              "same experiment's other seeds where they were found beside it.", "",
              "## Data and corpus", ""]
    cand = spec.get("candidates") or {}
    if spec["index"]:
        ix = spec["index"]
        lines += [f"- corpus: {ix.get('corpus_size')} sentences, content SHA-256 `{ix.get('corpus_content_sha256')}`",
                  f"- first stage: {ix.get('retriever')}" + (f", encoder `{ix.get('encoder')}` ({ix.get('pooler')})"
                                                           if ix.get("encoder") else "") + f", top k={spec['k']}",
                  f"- index: {'copied into index/' if ix['copied'] else 'not copied; recorded at ' + ix['path']}"]
    if cand.get("counts"):
        lines.append("- task data: " + ", ".join(f"{s} {n}" for s, n in cand["counts"].items()) + " inputs")
    if cand.get("data_provenance"):
        lines.append(f"- data provenance: `{json.dumps(cand['data_provenance'], sort_keys=True)[:300]}`")
    lines += ["", "## Evidence pipeline and settings", ""]
    if spec["reranked"]:
        r = spec["reranked"]
        lines.append(f"- reranker: `{r['lm']}` re-scores the first {r['k']} candidates, keeps d={r['top_d']}"
                     + (" (copied into lm/)" if r["copied_lm"] else " (not copied: pass `lm=` when loading "
                                                                     "elsewhere)"))
    lines += [f"- reader: `{reader.get('model', cfg.get('model'))}`, {spec['n_passages']} passages per input, "
              f"{reader.get('steps', '?')} steps (best {reader.get('best_step', '?')})",
              "- training config: `" + json.dumps({k: cfg[k] for k in sorted(cfg) if k not in ("data", "out")})[:600]
              + "`", "", "## Use", "", "```python", "import pgra", 'pipe = pgra.Pipeline.load("THIS_FOLDER")'
              + ("" if spec["index"] is None or spec["index"]["copied"] else '  # index="...", lm="..." elsewhere'),
              'print(pipe.predict(["A text to classify."])[0])  # prediction, scores, evidence', "```", "",
              "## Citation", "", "```bibtex", "@inproceedings{guo-etal-2023-prompt,",
              "  title     = {Prompt-Guided Retrieval Augmentation for Non-Knowledge-Intensive Tasks},",
              "  author    = {Guo, Zhicheng and Cheng, Sijie and Wang, Yile and Li, Peng and Liu, Yang},",
              "  booktitle = {Findings of the Association for Computational Linguistics: ACL 2023},",
              "  year      = {2023}", "}", "```", "", "## License", "",
              "pgra is Apache-2.0. The weights inherit the licenses of the models and data they were trained from "
              "(the reader's starting model, the task data, the corpus).", ""]
    return "\n".join(lines)


def _read_metrics(path: Path) -> dict[str, Any]:
    """The run's ``metrics.json``, checked where the model card reads it: a metric name, and results per split
    whose metric values are numbers (an InputError names the file and the field)."""
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
        if metric in r and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                and math.isfinite(value)):
            raise InputError(f"must be a number, got {shorten(value)} {REDO}", path=path,
                             field=f"results.{split}.{metric}")


def _seed_results(run: Path, metric: str, metrics: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]]:
    """(seed, results) of this run and of its experiment's sibling seeds (``<method>/seed-<n>/cell.json``, each
    checked: a hand-edited one is an InputError naming it and its field, not a card with a hole in it)."""
    from .predictions import read_cell

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


def read_export(directory: str | Path) -> dict[str, Any]:
    """The export's ``export.json``, checked in one place (a hand-edited one is an InputError naming the file and
    the field, never a KeyError later): a JSON object of kind ``export`` up to 64 MiB; ``n_passages``; ``index``
    (null, or a pointer with ``copied``, ``path``, ``corpus_content_sha256``, then ``k``,
    ``exclude_query_text`` and ``excluded`` beside it); ``reranked`` (null, or ``lm``, ``copied_lm``, ``top_d``,
    ``k``); the copies it names (``index/``, ``lm/``, ``reranked/``) stay inside the folder."""
    from .artifacts import path_under

    directory = Path(directory)
    path = require_file(directory / EXPORT_FILE, "export manifest")
    if path.stat().st_size > MAX_EXPORT_BYTES:
        raise InputError(f"{path.stat().st_size:,} bytes, more than an export's {MAX_EXPORT_BYTES:,} {REDO}",
                         path=path)
    spec = parse_json(path.read_bytes(), path)
    if not isinstance(spec, dict):
        raise InputError(f"holds a JSON {type(spec).__name__}, not an object {REDO}", path=path)
    if spec.get("kind") != EXPORT_KIND:
        raise InputError(f"not a pgra export (kind {shorten(spec.get('kind'), 60)})", path=path, field="kind")
    _field(spec, "n_passages", path, "a whole number from 0", lambda v: _is_count(v, 0, MAX_COUNT))
    ix = _field(spec, "index", path, "null or an object", lambda v: v is None or isinstance(v, dict))
    r = _field(spec, "reranked", path, "null or an object", lambda v: v is None or isinstance(v, dict))
    if ix is None:
        if r is not None:
            raise InputError(f"a reranking needs an index (index is null) {REDO}", path=path, field="reranked")
        return spec
    if _field(ix, "copied", path, "true or false", _is_bool, "index."):
        path_under(directory, "index")
    _field(ix, "path", path, "a path", _is_text, "index.")
    _field(ix, "corpus_content_sha256", path, "a fingerprint", _is_text, "index.")
    _field(spec, "k", path, "a whole number from 1", lambda v: _is_count(v, 1, MAX_COUNT))
    _field(spec, "exclude_query_text", path, "true or false", _is_bool)
    _field(spec, "excluded", path, f"a list of up to {MAX_IDS:,} corpus ids (strings)",
           lambda v: isinstance(v, list) and len(v) <= MAX_IDS and all(_is_text(i, MAX_ID) for i in v))
    if r is not None:
        path_under(directory, "reranked")
        _field(r, "lm", path, "a path or hub id", _is_text, "reranked.")
        if _field(r, "copied_lm", path, "true or false", _is_bool, "reranked."):
            path_under(directory, "lm")
        for name in ("top_d", "k"):
            _field(r, name, path, "a whole number from 1", lambda v: _is_count(v, 1, MAX_COUNT), "reranked.")
    return spec


def _field(obj: dict[str, Any], name: str, path: Path, want: str, ok: Any, prefix: str = "") -> Any:
    """``obj[name]`` when ``ok`` says it is ``want``; else an InputError naming the file and the field."""
    if name not in obj:
        raise InputError(f"missing (it must be {want}) {REDO}", path=path, field=prefix + name)
    if not ok(obj[name]):
        raise InputError(f"must be {want}, got {shorten(obj[name])} {REDO}", path=path, field=prefix + name)
    return obj[name]


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_count(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _is_text(value: Any, limit: int = MAX_TEXT) -> bool:
    return isinstance(value, str) and 0 < len(value) <= limit and "\x00" not in value


def load_export(directory: Path, device: str | None, trust_remote_code: bool, index: str | Path | None,
                lm: str | Path | None, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """The parts :meth:`pgra.Pipeline.load` assembles from an export: index, reranking, k, exclusions (``spec``:
    its :func:`read_export`, else read here)."""
    from .errors import StaleArtifactError
    from .rerank.core import Reranker
    from .retrieval.index import Index

    spec = read_export(directory) if spec is None else spec
    if not spec["index"]:
        return {}
    ix = spec["index"]
    path = Path(index) if index is not None else directory / "index" if ix["copied"] else Path(ix["path"])
    if not path.is_dir():
        raise InputError(f"the index is not at {path}: pass Pipeline.load(..., index=PATH) (its corpus must have "
                         f"content SHA-256 {shorten(ix['corpus_content_sha256'])})", path=directory / EXPORT_FILE,
                         field="index")
    found = Index(path, device=device, trust_remote_code=trust_remote_code)
    if found.corpus.fingerprint != ix["corpus_content_sha256"]:
        raise StaleArtifactError(f"index {path} holds another corpus than the one this export was trained with")
    reranking = None
    if spec["reranked"]:
        r = spec["reranked"]
        where = Path(lm) if lm is not None else directory / "lm" if r["copied_lm"] else r["lm"]
        reranking = Reranker.load(directory / "reranked", found.corpus, device, trust_remote_code, lm=where)
    return {"index": found, "k": spec["k"], "exclude_query_text": spec["exclude_query_text"],
            "reranking": reranking, "excluded": frozenset(spec["excluded"])}


__all__ = ["EXPORT_FILE", "EXPORT_KIND", "export_run", "load_export", "model_card", "read_export"]
