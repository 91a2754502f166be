"""``pgra export``: a finished reader run as one self-contained folder ``pgra.Pipeline.load(DIR)`` loads elsewhere.

It holds ``export.json`` (what the pipeline needs besides the reader, written last), the reader's ``manifest.json``,
``best/`` and ``metrics.json``, ``reranked/`` (what the second stage's replay reads), the copies ``index/``,
``encoder/``, ``store/`` (``--copy-index``) and ``lm/`` (``--copy-lm``), ``wheel/`` and a model card ``README.md``.
Everything is read and checked before anything is written; absolute paths become names (:func:`portable`).
docs/python-api.md tells the rest.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..core.errors import InputError, StaleArtifactError, shorten
from ..methods import stage_kinds, stage_of_kind
from ..rerank.prompt_guided.cache import cache_key_hash
from ..rerank.stage import FULL_SEARCH_KIND, candidates_of
from ..retrieval.base import INDEX_KIND
from ..retrieval.candidates_stage import CandidatesStage
from ..storage.artifacts import (
    MANIFEST,
    check_disjoint,
    claim_output,
    model_fingerprint,
    parse_json,
    path_under,
    read_json,
    read_json_object,
    read_manifest,
    require_file,
    verify_safetensors,
    write_json,
    write_text,
)
from ..storage.lock import output_lock
from ..storage.ownership import claimed, read_record
from ..storage.provenance import check_run_data, run_data
from .card import REDO, display_name, hub_id, is_text, model_card, portable
from .distribution import WHEEL_DIR, WheelError, wheel
from .hub import EXPORT_FILE, check_no_links_out

EXPORT_KIND = "export"
# what an export writes in its folder (replaced on a re-run); export.json, its completion mark, comes last
WRITTEN = ("best", "reranked", "index", "encoder", "lm", "store", "wheel", "metrics.json", "README.md", MANIFEST)
MAX_EXPORT_BYTES = 64 << 20  # export.json (its largest part: the excluded corpus ids)
MAX_IDS = 5_000_000  # excluded corpus ids
MAX_ID = 1000  # characters of one corpus id
MAX_COUNT = 1_000_000  # n_passages, k, top_d


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
    wheel: tuple[str, bytes] | None = None  # the running pgra's wheel (its file name, its bytes), for wheel/


def export_run(run: str | Path, out: str | Path, copy_index: bool = False, copy_lm: bool = False) -> Path:
    """Write ``out`` from the finished reader run ``run`` (see the module's docstring); returns ``out``. An
    ``out`` that is, holds or lies inside ``run`` (the experiment folder), or holds another artifact than an
    export, is refused with an InputError before anything is written; so is a damaged or linked-out run."""
    run, out = Path(run), Path(out)
    check_disjoint({"out": str(out)}, {"run": str(run)})  # the CLI's own check, here for Python callers too
    plan = _plan(run, copy_index, copy_lm, out.resolve().name)
    with output_lock(out, "pgra.export_run"):
        _claim_export(out)
        with claimed(out, EXPORT_KIND):
            _write(out, plan)
    return out


def _claim_export(out: Path) -> None:
    """Refuse ``out`` unless it is new, empty or an export (by its ownership record, not its manifest)."""
    record = read_record(out) if out.is_dir() else None
    if record is None:
        claim_output(out, EXPORT_KIND)
    elif record.get("kind") != EXPORT_KIND:
        raise InputError(f"{out} is a folder pgra wrote as {shorten(record.get('kind'), 60)}, not an export; "
                         "writing there would replace it: choose another output folder", field="out")


def _plan(run: Path, copy_index: bool, copy_lm: bool, folder_name: str = "") -> _Plan:
    """Read and check everything the export of ``run`` writes; ``folder_name``: the model card's name."""
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
        from ..retrieval.retrieve import CANDIDATES_KIND, recorded_exclusions  # (here: it loads torch)

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
    wheel, no_wheel = _wheel()
    spec["wheel"] = wheel[0] if wheel else None
    card = model_card(run, spec, reader, name=folder_name, rerank_config=rerank_config, no_wheel=no_wheel)
    return _Plan(run, spec, reader, card, reranked, index, lm, encoder, files, store_dir, wheel)


def _wheel() -> tuple[tuple[str, bytes] | None, str]:
    """The running pgra's wheel for the export to carry, or None and why not (a ``warning:`` line says it too)."""
    try:
        return wheel(), ""
    except WheelError as e:
        print(f"warning: the export carries no wheel of pgra: {e}", file=sys.stderr, flush=True)
        return None, str(e)


def _encoder_to_copy(index: Path, ix: dict[str, Any]) -> Path | None:
    """The local query encoder of ``index`` to copy (refused when changed), else None (BM25, a Hub id)."""
    m = read_manifest(index, INDEX_KIND)
    name, fp = m.get("encoder"), m.get("encoder_fingerprint")
    ix["copied_encoder"] = False
    if not name:
        return None
    if not is_text(name):
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
    path = Path(str(where)).expanduser()
    if not path.is_dir():
        raise InputError(f"{what} {shorten(str(where))} is not a folder on this machine (a hub id, or moved?): it "
                         "cannot be copied; export without this option", field=field)
    path = path.resolve()
    # a Hugging Face cache snapshot (models--ORG--NAME/snapshots/REV) links to ../../blobs/: its links may reach there
    snapshot = path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--")
    check_no_links_out(path, path.parent.parent if snapshot else path, field=field)
    return path


def _write(out: Path, plan: _Plan) -> None:
    """Compose the export in a temporary folder in ``out``, then move it into place, ``export.json`` last."""
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
    """Write every part of the export into the empty folder ``stage`` (pgra's records :func:`portable`)."""
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
    if plan.wheel is not None:
        (stage / WHEEL_DIR).mkdir()
        (stage / WHEEL_DIR / plan.wheel[0]).write_bytes(plan.wheel[1])
    write_text(stage / "README.md", plan.card)
    # the reader's manifest: Reader.load reads its task and precision
    write_json(stage / MANIFEST, portable(plan.reader))
    write_json(stage / EXPORT_FILE, _exported_spec(plan))


def _exported_spec(plan: _Plan) -> dict[str, Any]:
    """``export.json``: the spec :func:`portable`, but for the pointers to what was not copied."""
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
    """Copy the corpus pass's vectors ``cache`` into ``store``, its key's ``lm_name`` :func:`portable`."""
    meta = read_json(cache / "key.json")
    if isinstance(meta.get("key"), dict) and "lm_name" in meta["key"]:  # the one path a key holds (its texts stay)
        meta["key"] = {**meta["key"], "lm_name": portable(meta["key"]["lm_name"])}
    folder = store / cache_key_hash(meta["key"])
    folder.mkdir(parents=True)
    for name in ("vectors.npy", "done.npy"):
        shutil.copy2(cache / name, folder / name)
    write_json(folder / "key.json", meta)


PGRA_RECORDS = (MANIFEST, "corpus.json", "fid_config.json")  # pgra's own records among the copied files
NAME_KEYS = ("_name_or_path", "name_or_path")  # where transformers notes the folder a model was loaded from


def _portable_json_files(folder: Path) -> None:
    """Make pgra's own JSON records under ``folder`` :func:`portable`, and models' ``*config.json`` names."""
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


def read_export(directory: str | Path) -> dict[str, Any]:
    """The export's ``export.json``, checked field by field (the copies it names must lie inside the folder)."""
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
    _field(ix, "path", path, "a path", is_text, "index.")
    if ix.get("encoder") is not None:  # absent from exports before the encoder was copied
        _field(ix, "encoder", path, "null, a path or a hub id", is_text, "index.")
    if "copied_encoder" in ix and _field(ix, "copied_encoder", path, "true or false", _is_bool, "index."):
        if not ix.get("encoder"):
            raise InputError(f"a copied encoder needs the encoder's name (index.encoder is missing) {REDO}",
                             path=path, field="index.encoder")
        path_under(directory, "encoder")
    _field(ix, "corpus_content_sha256", path, "a fingerprint", is_text, "index.")
    _field(spec, "k", path, "a whole number from 1", lambda v: _is_count(v, 1, MAX_COUNT))
    _field(spec, "exclude_query_text", path, "true or false", _is_bool)
    _field(spec, "excluded", path, f"a list of up to {MAX_IDS:,} corpus ids (strings)",
           lambda v: isinstance(v, list) and len(v) <= MAX_IDS and all(is_text(i, MAX_ID) for i in v))
    if r is not None:
        path_under(directory, "reranked")
        if "kind" in r:  # absent from exports before any stage's run was exported (the prompt-guided reranker's)
            _field(r, "kind", path, f"one of {', '.join(stage_kinds())}", lambda v: v in stage_kinds(), "reranked.")
        _field(r, "lm", path, "null, a path or a hub id", lambda v: v is None or is_text(v), "reranked.")
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
            _field(store, "path", path, "a path", is_text, "reranked.store.")
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


def load_export(directory: Path, device: str | None, trust_remote_code: bool, index: str | Path | None,
                lm: str | Path | None, spec: dict[str, Any] | None = None,
                encoder: str | Path | None = None) -> dict[str, Any]:
    """The parts :meth:`pgra.Pipeline.load` assembles from an export (copies given checked by fingerprint)."""
    spec = read_export(directory) if spec is None else spec
    if not (ix := spec["index"]):
        return {}
    path = Path(index) if index is not None else directory / "index" if ix["copied"] else Path(ix["path"])
    if not path.is_dir():
        raise InputError(f"the index is not at {path}: pass Pipeline.load(..., index=PATH) (its corpus must have "
                         f"content SHA-256 {shorten(ix['corpus_content_sha256'])})", path=directory / EXPORT_FILE,
                         field="index")
    check_encoder_given(encoder, ix)
    query_encoder = str(encoder) if encoder is not None else \
        str(directory / "encoder") if ix.get("copied_encoder") else None
    from ..retrieval.index import Index  # (here: it loads torch, which exporting does not need)

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
    """Refuse ``encoder=`` for an index ``record`` without a query encoder (BM25)."""
    if encoder is not None and not record.get("encoder"):
        raise InputError(f"the run's index ({shorten(record.get('retriever'), 40)}) has no query encoder: encoder= "
                         "applies to a dense index", field="encoder")


__all__ = ["EXPORT_FILE", "EXPORT_KIND", "check_encoder_given", "display_name", "export_run", "hub_id", "load_export",
           "model_card", "portable", "read_export"]
