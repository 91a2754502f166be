"""``pgra export``: a finished reader run as one self-contained folder a colleague loads with
``pgra.Pipeline.load(DIR)`` on another machine.

Layout of ``DIR``::

    export.json              what the pipeline needs besides the reader: the first-stage index (a pointer with its
                             corpus fingerprint, or ``index/``), k, exclusions, the reranking and its LM
    manifest.json            the run's reader manifest; best/ (the reader: safetensors, tokenizer, config),
    metrics.json             and its metrics
    reranked/                the second stage's manifest and the files its replay reads (the prompt-guided
                             reranker's demonstrations): any reranker's run (pgra, fid_<reranker>) or pgra_full's
    index/, lm/              copies of the index and the second stage's model (``--copy-index``, ``--copy-lm``)
    store/                   a copy of the vectors a pgra_full run searches (the corpus pass's, ``--copy-index``)
    encoder/                 a copy of the index's query encoder (``--copy-index`` of a dense index whose encoder
                             is a local folder; an encoder given as a Hub id is recorded by that id)
    README.md                a model card in the Hugging Face Hub's format

Without the copies the folder records where the index, its encoder and the LM were and what they held (the
corpus's, the encoder's and the LM files' fingerprints); ``Pipeline.load(DIR, index=..., encoder=..., lm=...)``
points at the colleague's copies, refused when they hold something else. ``Pipeline.load("USER/NAME")`` downloads an
export uploaded to the Hub (``pgra export --push-to-hub``).

No file the export writes names a folder of the exporting machine: every absolute path its manifests and configs
recorded (the run, the task's data, the corpus, the models, the caches) is replaced by the folder's or file's name
(:func:`portable`), and the model card shows names and Hub ids only. The exceptions are the pointers an export
without a copy loads from on the machine that made it (``export.json``'s ``index.path``, ``index.encoder`` and
``reranked.lm``); the copied model folders (``lm/``, ``encoder/``) are byte-for-byte copies, their fingerprints.

Everything is read and checked before anything is written (the run's weights against their headers, its
``fid_config.json``, its metrics and its sibling seeds' ``cell.json``, and every file to copy: a symbolic link out
of what is exported is refused, never followed). The folder is then composed in a temporary folder inside ``DIR``
and moved into place, ``export.json`` last: a failed export leaves no partial folder, and re-running an export
into its own folder replaces it (a folder of any other kind is refused). :func:`read_export` is the one reader of
``export.json``.
"""

from __future__ import annotations

import math
import re
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
from .hub import EXPORT_FILE
from .markdown import md_code, md_fence, md_row, md_table, md_text

EXPORT_KIND = "export"
# what an export writes in its folder (replaced on a re-run); export.json, its completion mark, comes last
WRITTEN = ("best", "reranked", "index", "encoder", "lm", "store", "metrics.json", "README.md", MANIFEST)
MAX_EXPORT_BYTES = 64 << 20  # export.json (its largest part: the excluded corpus ids)
MAX_TEXT = 4096  # characters of a path, hub id or fingerprint in export.json
MAX_IDS = 5_000_000  # excluded corpus ids
MAX_ID = 1000  # characters of one corpus id
MAX_COUNT = 1_000_000  # n_passages, k, top_d
REDO = "(edited by hand? export the run again)"
PROMPT_GUIDED = "prompt-guided reranking"  # the title of the prompt-guided reranker's stage (Stage.carried)


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
    encoder: Path | None = None  # the index's encoder folder to copy (--copy-index of a dense index)
    files: tuple[str, ...] = ()  # the second stage's files its replay reads (copied into reranked/)
    store: Path | None = None  # the cache folder of vectors a pgra_full run searches, to copy (--copy-index)


def export_run(run: str | Path, out: str | Path, copy_index: bool = False, copy_lm: bool = False) -> Path:
    """Write ``out`` from the finished reader run ``run`` (see the module's docstring); returns ``out``. An
    ``out`` that is, holds or lies inside ``run`` (the experiment folder), or holds another artifact than an
    export, is refused with an InputError before anything is written; so is a damaged or linked-out run."""
    from .artifacts import check_disjoint
    from .lock import output_lock
    from .ownership import claimed

    run, out = Path(run), Path(out)
    check_disjoint({"out": str(out)}, {"run": str(run)})  # the CLI's own check, here for Python callers too
    plan = _plan(run, copy_index, copy_lm, out.resolve().name)
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


def _plan(run: Path, copy_index: bool, copy_lm: bool, folder_name: str = "") -> _Plan:
    """Read and check everything the export of ``run`` writes (nothing is written yet); ``folder_name``: the
    export folder's name (the model card's)."""
    from . import __version__
    from .hub import check_no_links_out
    from .provenance import check_run_data, run_data
    from .rerank.core import candidates_of
    from .retrieval.candidates_stage import CandidatesStage
    from .retrieval.retrieve import CANDIDATES_KIND, recorded_exclusions
    from .stages import stage_kinds, stage_of_kind

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
    reranked, rerank_config, files, store_dir = None, None, (), None
    if spec["n_passages"]:
        data = run_data(run, reader)
        check_run_data(run, data, "re-run the experiment (or pgra train) before exporting")
        manifest = read_manifest(data, stage_kinds())
        if manifest["kind"] != CANDIDATES_KIND:  # a second stage's folder: its stage says what its replay needs
            stage = stage_of_kind(manifest["kind"])
            if not stage.replayable:
                raise stage.not_replayable(data)
            carried = stage.carried(data, manifest)
            files = carried.files
            for name in files:
                check_no_links_out(data / name, data, field="run")
            reranked, data = data, candidates_of(data, manifest)
            rerank_config = manifest.get("config") if isinstance(manifest.get("config"), dict) else None
            if carried.store is not None and copy_index:  # copied: a link out of it is refused, never followed
                check_no_links_out(carried.store, carried.store, field="copy_index")
            store = {"path": str(carried.store.parent.resolve()), "copied": copy_index} if carried.store else None
            spec["reranked"] = {"kind": manifest["kind"], "title": carried.title, "lm": carried.model,
                                "lm_fingerprint": carried.model_fingerprint,
                                "copied_lm": bool(copy_lm and carried.model), "top_d": manifest["top_d"],
                                "k": int(manifest.get("k") or 0), "store": store}
            store_dir = carried.store if copy_index else None
        cand = CandidatesStage.open(data)
        if not cand.get("index"):
            raise InputError("the run's data was imported (no index): its evidence cannot be retrieved for new "
                             "texts", path=data / MANIFEST, field="index")
        spec["index"] = {**cand["index"], "copied": copy_index}
        spec.update(k=int(cand["k"]), exclude_query_text=bool(cand["config"].get("exclude_query_text")),
                    excluded=sorted(recorded_exclusions(cand, data)), candidates=cand)
    index = _folder_to_copy(spec["index"]["path"], "copy_index", "the index") if copy_index and spec["index"] \
        else None
    lm = _folder_to_copy(spec["reranked"]["lm"], "copy_lm", "the second stage's model") \
        if copy_lm and spec["reranked"] and spec["reranked"]["lm"] else None
    if lm is not None:
        verify_safetensors(lm)
    encoder = _encoder_to_copy(index, spec["index"]) if index is not None else None
    if spec["index"] and index is None:
        spec["index"]["copied_encoder"] = False
    card = model_card(run, spec, reader, name=folder_name, rerank_config=rerank_config)
    return _Plan(run, spec, reader, card, reranked, index, lm, encoder, files, store_dir)


def _encoder_to_copy(index: Path, ix: dict[str, Any]) -> Path | None:
    """The query encoder of the index folder ``index`` (``--copy-index``) to copy beside it: its folder when the
    index was built with a local one (refused when it is gone or its files changed since), None when the index has
    none (BM25) or was built with a Hub id (recorded in ``ix``, the export's index record, by that id)."""
    from .artifacts import model_fingerprint
    from .retrieval.base import INDEX_KIND

    m = read_manifest(index, INDEX_KIND)
    name, fp = m.get("encoder"), m.get("encoder_fingerprint")
    ix["copied_encoder"] = False
    if not name:
        return None
    if not _is_text(name):
        raise InputError(f"must be a path or hub id, got {shorten(name)} {REDO}", path=index / MANIFEST,
                         field="encoder")
    ix["encoder"] = name
    if (isinstance(fp, str) and fp.startswith("hub:")) or (fp is None and not Path(name).expanduser().is_dir()):
        return None  # a Hub id: loaded from the Hub (or its cache) where the export is used
    path = _folder_to_copy(name, "copy_index", "the index's encoder")
    if fp is not None and model_fingerprint(str(path)) != fp:
        raise InputError(f"the index's encoder {display_name(name)} holds other files than the index was built with "
                         "(its fingerprint differs): put the encoder the index was built with back, or rebuild the "
                         "index", field="copy_index")
    ix["copied_encoder"] = True
    return path


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
    """Write every part of the export into the empty folder ``stage``: what pgra wrote made :func:`portable` (no
    absolute path of this machine), the copied model folders as they are."""
    shutil.copytree(plan.run / "best", stage / "best")
    _portable_json_files(stage / "best")  # fid_config.json's task_spec names the task's YAML and data
    shutil.copy2(plan.run / "metrics.json", stage / "metrics.json")
    if plan.reranked is not None:
        (stage / "reranked").mkdir()
        for name in plan.files:
            shutil.copy2(plan.reranked / name, stage / "reranked" / name)
        m = read_json_object(plan.reranked / MANIFEST)  # its record of the files kept: the splits stay behind
        if isinstance(m.get("files"), dict):
            m["files"] = {k: v for k, v in m["files"].items() if k in plan.files}
        if isinstance(m.get("embedding"), dict):  # the evidence cache of this machine: elsewhere it is not there
            m["embedding"] = {k: v for k, v in m["embedding"].items() if k != "cache"}
        write_json(stage / "reranked" / MANIFEST, portable(m))
    if plan.store is not None:
        _copy_store(plan.store, stage / "store")
    if plan.lm is not None:
        shutil.copytree(plan.lm, stage / "lm")
    if plan.index is not None:
        shutil.copytree(plan.index, stage / "index")
        _portable_json_files(stage / "index")
    if plan.encoder is not None:
        shutil.copytree(plan.encoder, stage / "encoder")
    write_text(stage / "README.md", plan.card)
    # the reader's manifest: Reader.load reads its task and precision
    write_json(stage / MANIFEST, portable(plan.reader))
    write_json(stage / EXPORT_FILE, _exported_spec(plan))


def _exported_spec(plan: _Plan) -> dict[str, Any]:
    """``export.json``: the spec made :func:`portable`, but for the pointers an export without a copy loads from on
    the machine that made it (the index's folder and encoder, the reranking LM)."""
    spec = plan.spec
    out = portable(spec)
    out["run"] = plan.run.resolve().name
    ix, r = spec["index"], spec["reranked"]
    if ix and not ix["copied"]:
        out["index"]["path"] = ix["path"]
    if ix and not ix["copied"] and not ix.get("copied_encoder"):
        out["index"]["encoder"] = ix.get("encoder")
    if r and not r["copied_lm"]:
        out["reranked"]["lm"] = r["lm"]
    if r and r.get("store") and not r["store"]["copied"]:
        out["reranked"]["store"]["path"] = r["store"]["path"]
    return out


def _copy_store(cache: Path, store: Path) -> None:
    """Copy the cache folder ``cache`` (the corpus pass's vectors, checked complete when planned) into ``store``:
    its arrays byte for byte, its key with the LM's name (``lm_name``) :func:`portable` (the folder named by that
    key's hash, as the cache names its folders)."""
    from .artifacts import read_json
    from .rerank.cache import cache_key_hash

    meta = read_json(cache / "key.json")
    if isinstance(meta.get("key"), dict) and "lm_name" in meta["key"]:  # the one path a key holds (its texts stay)
        meta["key"] = {**meta["key"], "lm_name": portable(meta["key"]["lm_name"])}
    folder = store / cache_key_hash(meta["key"])
    folder.mkdir(parents=True)
    for name in ("vectors.npy", "done.npy"):
        shutil.copy2(cache / name, folder / name)
    write_json(folder / "key.json", meta)


# what a manifest holds that is the task's or the corpus's content, never a path of this machine: kept as it is
CONTENT_KEYS = frozenset({"labels", "demo_words", "reader_words", "label_map", "rerank_template", "reader_template",
                          "description", "instruction", "prompt_prefix", "ids", "demonstrations", "texts"})
PGRA_RECORDS = (MANIFEST, "corpus.json", "fid_config.json")  # pgra's own records among the copied files
NAME_KEYS = ("_name_or_path", "name_or_path")  # where transformers notes the folder a model was loaded from
# a metric of metrics.json as the Hub's model-index names it (https://hf.co/metrics), and its title
HUB_METRICS = {"accuracy": ("accuracy", "Accuracy"), "mcc": ("matthews_correlation", "Matthews correlation"),
               "macro_f1": ("f1", "Macro F1")}
# how pgra is installed: it is not on PyPI (docs/setup.md)
INSTALL = ("# pgra is installed from a clone of its repository (not on PyPI; its docs/setup.md has the details):",
           'pip install torch && pip install ".[cpu]"   # in the clone; ".[gpu]" on a CUDA 12 machine')


def portable(value: Any) -> Any:
    """``value`` (what a manifest or config holds) with every absolute path of this machine (``/...``, ``~...``,
    ``C:\\...``) replaced by :func:`display_name`, the folder's or file's name (a Hugging Face cache snapshot by its Hub
    id); relative paths, Hub ids and the task's content (labels, words, templates, ids: :data:`CONTENT_KEYS`) are
    kept."""
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
    import re

    return ("\n" not in text and 0 < len(text) <= MAX_TEXT
            and (text.startswith(("/", "~")) or re.match(r"[A-Za-z]:[\\/]", text) is not None))


def display_name(name: str) -> str:
    """How an export shows the model, folder or file ``name``: a Hugging Face cache snapshot
    (``.../models--ORG--NAME/snapshots/REV``) by its Hub id, another absolute path by its last part (or "(a local
    folder)"), a Hub id or relative path as it is."""
    if not is_local_path(name):
        return name
    parts = [p for p in name.replace("\\", "/").split("/") if p]
    for i, part in enumerate(parts):
        if part.startswith("models--") and i + 2 < len(parts) and parts[i + 1] == "snapshots":
            return part[len("models--"):].replace("--", "/")
    last = parts[-1] if parts else ""
    return last if last not in ("", "~", ".", "..") and not last.endswith(":") else "(a local folder)"


def hub_id(name: Any) -> str | None:
    """``name`` when it is a Hugging Face Hub id (``NAME`` or ``ORG/NAME``, no folder of that name here; or the id of
    a Hub cache snapshot's path), else None (a local folder, or not a name)."""
    if not _is_text(name) or "\n" in name:
        return None
    if is_local_path(name):
        shown = display_name(name)
        return shown if "/" in shown and "models--" in name else None
    if name.startswith(".") or name.count("/") > 1 or Path(name).exists() or \
            ("/" in name and Path(name.split("/", 1)[0]).is_dir()):
        return None
    try:
        from huggingface_hub.utils import HFValidationError, validate_repo_id
    except ImportError:
        return None
    try:
        validate_repo_id(name)
    except HFValidationError:
        return None
    return name


def _portable_json_files(folder: Path) -> None:
    """Make the JSON files under ``folder`` that record where things were :func:`portable` in place: pgra's own
    records (``manifest.json``, ``corpus.json``, ``fid_config.json``) whole, but files a ``manifest.json`` records
    with their size and hash (checked on load; they hold no path); a model's configs (``*config.json``) only where
    transformers noted the folder it was loaded from (``_name_or_path``). Nothing else is read or rewritten: a
    tokenizer's vocabulary is text, never a path, even where it begins with ``/``."""
    recorded: set[Path] = set()
    for manifest in folder.rglob(MANIFEST):
        files = read_json_object(manifest).get("files")
        if isinstance(files, dict):
            recorded.update((manifest.parent / str(name)).resolve() for name in files)
    for path in sorted(folder.rglob("*.json")):
        own = path.name in PGRA_RECORDS
        if path.resolve() in recorded or not path.is_file() or not (own or path.name.endswith("config.json")):
            continue
        value = parse_json(path.read_bytes(), path)
        kept = portable(value) if own else _portable_names(value)
        if kept != value:
            write_json(path, kept)


def _portable_names(value: Any) -> Any:
    """A model's config with the folders it was loaded from (``_name_or_path``, nested sub-configs' too) by name."""
    if isinstance(value, dict):
        return {k: display_name(v) if k in NAME_KEYS and isinstance(v, str) else _portable_names(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_portable_names(v) for v in value]
    return value


def _remove(path: Path) -> None:
    """Remove ``path`` (a link itself, never what it points to)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def model_card(run: Path, spec: dict[str, Any], reader: dict[str, Any], name: str = "",
               rerank_config: dict[str, Any] | None = None) -> str:
    """``README.md`` in the Hub's model-card format, as sentence-transformers writes one: YAML metadata the Hub
    reads (``library_name``, ``tags``, ``base_model`` when the reader started from a Hub model, ``datasets`` when
    the task's data is a Hub dataset, ``metrics`` and a ``model-index`` with the run's test result), then task and
    labels, the results per seed, data and corpus, the evidence pipeline, every setting (a YAML block, whole), how
    to install pgra and load the folder (``name``, or the Hub id :func:`pgra.hub.push_to_hub` puts in), citation
    and license. No absolute path of this machine: models and folders by their Hub id or their name
    (:func:`display_name`)."""
    import json

    import yaml

    task = reader["task"]
    metrics = _read_metrics(run / "metrics.json")
    metric = metrics.get("metric", task.get("metric", "accuracy"))
    cfg = reader.get("config") if isinstance(reader.get("config"), dict) else {}
    seeds = _seed_results(run, metric, metrics)
    cand = spec.get("candidates") or {}
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
             "## Results", "", *md_table(["seed", "split", metric, "examples"], [])]
    for seed, results in seeds:
        lines += [md_row([seed, split, f"{100 * r[metric]:.1f}", r.get("examples", "")])
                  for split, r in results.items() if metric in r]
    lines += ["", "This folder holds the reader of seed " + str(cfg.get("seed", "?")) + "; the other rows are the "
              "same experiment's other seeds where they were found beside it.", "",
              "## Data and corpus", ""]
    ix = spec["index"]
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
    datasets = _datasets(task, cand)
    if datasets:
        lines.append("- task data from the Hub: " + ", ".join(f"`{d}`" for d in datasets))
    provenance = cand.get("data_provenance")
    if isinstance(provenance, dict):
        lines += [f"- {split}: {_provenance_line(p)}" for split, p in provenance.items() if isinstance(p, dict)]
    lines += ["", "## Evidence pipeline", ""]
    if spec["reranked"]:
        r = spec["reranked"]
        scorer = (f"`{display_name(str(r['lm']))}` ({second}" + (", copied into lm/)" if r["copied_lm"] else
                  ", not copied: pass `lm=` when loading elsewhere)")) if r["lm"] else second
        reads = "the whole corpus" if r.get("store") else f"the first {r['k']} candidates" if r["k"] else \
            "every candidate"
        lines.append(f"- reranker: {scorer} re-scores {reads}, keeps d={r['top_d']}")
        if r.get("store"):
            lines.append("- the corpus pass's embeddings it searches: " + (
                "copied into store/" if r["store"]["copied"] else
                "not copied (predict where the run was made, or export it with --copy-index to carry them)"))
    lines += [f"- reader: `{display_name(str(model))}`, {spec['n_passages']} passages per input, "
              f"{reader.get('steps', '?')} steps (best {reader.get('best_step', '?')})", "",
              "## Settings", "", "Every setting of the run, whole (paths by their folder's name):", "",
              *md_fence(yaml.safe_dump(_settings(spec, cfg, rerank_config), sort_keys=True,
                                       allow_unicode=True).rstrip("\n"), "yaml"), "", "## Use", "", "```bash", *INSTALL, "```", "", "```python", "import pgra", "",
              f"pipe = pgra.Pipeline.load({json.dumps(name)})" + _load_hint(spec),
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
    return "\n".join(lines)


def _kind(spec: dict[str, Any]) -> tuple[str, str]:
    """The exported run's kind as the card names it (``PGRA``, ``PGRA (whole corpus)``, ``FiD + <reranker>``,
    ``FiD``, ``no-retrieval``) and its second stage's title (empty: none)."""
    r = spec["reranked"]
    if not r:
        return ("FiD" if spec["n_passages"] else "no-retrieval"), ""
    from .rerank.stage import FULL_SEARCH_KIND

    title = r.get("title") or PROMPT_GUIDED  # exports before any other stage's were the prompt-guided reranker's
    if r.get("kind") == FULL_SEARCH_KIND:
        return "PGRA (whole corpus)", title
    return ("PGRA" if title == PROMPT_GUIDED else f"FiD + {title}"), title


def _front_matter(task: dict[str, Any], metric: str, metrics: dict[str, Any], name: str, model: Any,
                  spec: dict[str, Any]) -> str:
    """The card's YAML metadata (sentence-transformers' keys): a YAML document, whatever the names hold."""
    import yaml

    hub_metric, title = HUB_METRICS.get(metric, (metric, metric))
    tags = ["pgra", "fusion-in-decoder", "retrieval-augmented", "text-classification"]
    if spec["reranked"] and _kind(spec)[0].startswith("PGRA"):
        tags.append("prompt-guided-reranking")
    front: dict[str, Any] = {"library_name": "pgra", "license": "apache-2.0", "pipeline_tag": "text-classification",
                             "tags": tags}
    base = hub_id(model)
    if base:
        front["base_model"] = base
    datasets = _datasets(task, spec.get("candidates") or {})
    if datasets:
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
    ix = spec["index"]
    if ix:
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
    return portable(_json_safe(out))


def _json_safe(value: Any) -> Any:
    """``value`` as JSON would hold it (what YAML dumps safely)."""
    import json

    return json.loads(json.dumps(value, default=str))


def _load_hint(spec: dict[str, Any]) -> str:
    """What ``Pipeline.load`` needs beside the folder on another machine: the parts the export did not copy."""
    ix, r = spec["index"], spec["reranked"]
    need = []
    if ix and not ix["copied"]:
        need.append('index="..."')
    if ix and ix.get("encoder") and not ix.get("copied_encoder") and not hub_id(ix["encoder"]):
        need.append('encoder="..."')
    if r and r["lm"] and not r["copied_lm"] and not hub_id(r["lm"]):
        need.append('lm="..."')
    return f"  # elsewhere: {', '.join(need)} (local copies)" if need else ""


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
    ``exclude_query_text`` and ``excluded`` beside it; ``encoder`` and ``copied_encoder`` when there);
    ``reranked`` (null, or ``lm`` (null for a reranker without a model), ``copied_lm``, ``top_d``, ``k`` and, in
    exports of any stage's run, ``kind`` (a registered stage's), ``title`` and ``store`` (a full search's: ``path``,
    ``copied``)); the copies it names (``index/``, ``encoder/``, ``lm/``, ``reranked/``, ``store/``) stay inside the
    folder."""
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
    if ix.get("encoder") is not None:  # absent from exports before the encoder was copied
        _field(ix, "encoder", path, "null, a path or a hub id", _is_text, "index.")
    if "copied_encoder" in ix and _field(ix, "copied_encoder", path, "true or false", _is_bool, "index."):
        if not ix.get("encoder"):
            raise InputError(f"a copied encoder needs the encoder's name (index.encoder is missing) {REDO}",
                             path=path, field="index.encoder")
        path_under(directory, "encoder")
    _field(ix, "corpus_content_sha256", path, "a fingerprint", _is_text, "index.")
    _field(spec, "k", path, "a whole number from 1", lambda v: _is_count(v, 1, MAX_COUNT))
    _field(spec, "exclude_query_text", path, "true or false", _is_bool)
    _field(spec, "excluded", path, f"a list of up to {MAX_IDS:,} corpus ids (strings)",
           lambda v: isinstance(v, list) and len(v) <= MAX_IDS and all(_is_text(i, MAX_ID) for i in v))
    if r is not None:
        path_under(directory, "reranked")
        if "kind" in r:  # absent from exports before any stage's run was exported (the prompt-guided reranker's)
            from .stages import stage_kinds

            _field(r, "kind", path, f"one of {', '.join(stage_kinds())}", lambda v: v in stage_kinds(), "reranked.")
        _field(r, "lm", path, "null, a path or a hub id", lambda v: v is None or _is_text(v), "reranked.")
        if _field(r, "copied_lm", path, "true or false", _is_bool, "reranked."):
            if r["lm"] is None:
                raise InputError(f"a copied model needs the model's name (reranked.lm is null) {REDO}", path=path,
                                 field="reranked.lm")
            path_under(directory, "lm")
        _field(r, "top_d", path, "a whole number from 1", lambda v: _is_count(v, 1, MAX_COUNT), "reranked.")
        _field(r, "k", path, "a whole number from 0", lambda v: _is_count(v, 0, MAX_COUNT), "reranked.")
        store = _field(r, "store", path, "null or an object", lambda v: v is None or isinstance(v, dict),
                       "reranked.") if "store" in r else None
        if store is not None:
            if _field(store, "copied", path, "true or false", _is_bool, "reranked.store."):
                path_under(directory, "store")
            _field(store, "path", path, "a path", _is_text, "reranked.store.")
        from .rerank.stage import FULL_SEARCH_KIND

        if r.get("kind") == FULL_SEARCH_KIND and (store is None or r["lm"] is None):
            raise InputError(f"a search of the whole corpus needs its LM and the store of vectors it searches "
                             f"(reranked.{'store' if store is None else 'lm'} is missing) {REDO}", path=path,
                             field=f"reranked.{'store' if store is None else 'lm'}")
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
                lm: str | Path | None, spec: dict[str, Any] | None = None,
                encoder: str | Path | None = None) -> dict[str, Any]:
    """The parts :meth:`pgra.Pipeline.load` assembles from an export: index, reranking, k, exclusions (``spec``:
    its :func:`read_export`, else read here). ``index`` / ``encoder`` / ``lm``: the caller's copies (else the
    export's own, else where the export recorded them), each refused when it holds other files than the run used
    (the corpus's, the encoder's and the LM's fingerprints)."""
    from .errors import StaleArtifactError
    from .retrieval.index import Index
    from .stages import stage_of_kind

    spec = read_export(directory) if spec is None else spec
    if not spec["index"]:
        return {}
    ix = spec["index"]
    path = Path(index) if index is not None else directory / "index" if ix["copied"] else Path(ix["path"])
    if not path.is_dir():
        raise InputError(f"the index is not at {path}: pass Pipeline.load(..., index=PATH) (its corpus must have "
                         f"content SHA-256 {shorten(ix['corpus_content_sha256'])})", path=directory / EXPORT_FILE,
                         field="index")
    check_encoder_given(encoder, ix)
    query_encoder = str(encoder) if encoder is not None else \
        str(directory / "encoder") if ix.get("copied_encoder") else None
    found = Index(path, encoder=query_encoder, device=device, trust_remote_code=trust_remote_code)
    if found.corpus.fingerprint != ix["corpus_content_sha256"]:
        raise StaleArtifactError(f"index {path} holds another corpus than the one this export was trained with")
    reranking = None
    if spec["reranked"]:  # the stage that wrote the folder does its work again, from what the export carried
        r = spec["reranked"]
        if lm is not None and r["lm"] is None:
            raise InputError("the run's second stage loads no model: lm= applies to a run whose reranker has one",
                             field="lm")
        where = Path(lm) if lm is not None else directory / "lm" if r["copied_lm"] else r["lm"]
        store = r.get("store")
        vectors = None if not store else directory / "store" if store["copied"] else Path(store["path"])
        manifest = read_manifest(directory / "reranked", r.get("kind", "reranked"))
        reranking = stage_of_kind(manifest["kind"]).replay(directory / "reranked", manifest, found, device,
                                                           trust_remote_code, model=where, store=vectors)
    return {"index": found, "k": spec["k"], "exclude_query_text": spec["exclude_query_text"],
            "reranking": reranking, "excluded": frozenset(spec["excluded"])}


def check_encoder_given(encoder: str | Path | None, record: dict[str, Any]) -> None:
    """``encoder=`` applies to an index with a query encoder (``record``: the export's or a candidates manifest's
    index record); for another (BM25) it is an InputError naming ``encoder``."""
    if encoder is not None and not record.get("encoder"):
        raise InputError(f"the run's index ({shorten(record.get('retriever'), 40)}) has no query encoder: encoder= "
                         "applies to a dense index", field="encoder")


__all__ = ["EXPORT_FILE", "EXPORT_KIND", "check_encoder_given", "display_name", "export_run", "hub_id", "load_export",
           "model_card", "portable", "read_export"]
