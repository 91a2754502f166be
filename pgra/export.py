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
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from .artifacts import MANIFEST, read_json, read_manifest, write_json, write_text
from .errors import InputError

EXPORT_FILE = "export.json"
EXPORT_KIND = "export"


def export_run(run: str | Path, out: str | Path, copy_index: bool = False, copy_lm: bool = False) -> Path:
    """Write ``out`` from the finished reader run ``run`` (see the module's docstring); returns ``out``."""
    from . import __version__
    from .provenance import check_run_data, run_data
    from .rerank.core import candidates_of
    from .retrieval.retrieve import read_candidates_manifest, recorded_exclusions

    run, out = Path(run), Path(out)
    reader = read_manifest(run, "reader")
    if not (run / "best").is_dir():
        raise InputError("no best/ reader in the run: not a finished `pgra train` run", path=run, field="run")
    fid = read_json(run / "best" / "fid_config.json")
    spec: dict[str, Any] = {"kind": EXPORT_KIND, "pgra": __version__, "run": str(run.resolve()),
                            "n_passages": int(fid["n_passages"]), "index": None, "reranked": None}
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
    _write(run, out, spec, reader, reranked, copy_index, copy_lm)
    return out


def _write(run: Path, out: Path, spec: dict[str, Any], reader: dict[str, Any], reranked: Path | None,
           copy_index: bool, copy_lm: bool) -> None:
    from .artifacts import claim_output
    from .ownership import claimed

    claim_output(out, EXPORT_KIND)
    with claimed(out, EXPORT_KIND):
        for name in ("best", "reranked", "index", "lm"):
            if (out / name).exists():
                shutil.rmtree(out / name)
        shutil.copytree(run / "best", out / "best")
        shutil.copy2(run / "metrics.json", out / "metrics.json")
        if reranked is not None:
            (out / "reranked").mkdir()
            shutil.copy2(reranked / "demonstrations.json", out / "reranked" / "demonstrations.json")
            m = read_json(reranked / MANIFEST)  # its record of the files kept: the splits stay behind
            if isinstance(m.get("files"), dict):
                m["files"] = {k: v for k, v in m["files"].items() if k == "demonstrations.json"}
            write_json(out / "reranked" / MANIFEST, m)
            if copy_lm:
                shutil.copytree(spec["reranked"]["lm"], out / "lm")
        if copy_index:
            shutil.copytree(spec["index"]["path"], out / "index")
        write_text(out / "README.md", model_card(run, spec, reader))
        write_json(out / MANIFEST, reader)  # the reader's manifest: Reader.load reads its task and precision
        write_json(out / EXPORT_FILE, spec)  # last: a folder without it is an unfinished export


def model_card(run: Path, spec: dict[str, Any], reader: dict[str, Any]) -> str:
    """``README.md`` in the Hub's model-card format: YAML metadata, then task, labels, metrics with seeds, data
    and corpus, the evidence pipeline, the settings, how to load it, citation and license."""
    import json

    task = reader["task"]
    metrics = read_json(run / "metrics.json")
    metric = metrics.get("metric", task.get("metric", "accuracy"))
    cfg = reader.get("config", {})
    seeds = _seed_results(run, metric)
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


def _seed_results(run: Path, metric: str) -> list[tuple[Any, dict[str, Any]]]:
    """(seed, results) of this run and of its experiment's sibling seeds (``<method>/seed-<n>/cell.json``)."""
    cells = sorted(run.parent.glob("seed-*/cell.json")) if run.name.startswith("seed-") else []
    found = []
    for cell in cells:
        try:
            rec = read_json(cell)
            found.append((rec.get("seed"), rec.get("results", {})))
        except Exception:  # noqa: BLE001 - a damaged sibling is left out of the card, not fatal
            continue
    if not found:
        found = [(read_manifest(run, "reader").get("config", {}).get("seed"), read_json(run / "metrics.json")
                  .get("results", {}))]
    return found


def load_export(directory: Path, device: str | None, trust_remote_code: bool, index: str | Path | None,
                lm: str | Path | None) -> dict[str, Any]:
    """The parts :meth:`pgra.Pipeline.load` assembles from an export: index, reranking, k, exclusions."""
    from .errors import StaleArtifactError
    from .rerank.core import Reranker
    from .retrieval.index import Index

    spec = read_json(directory / EXPORT_FILE)
    if spec.get("kind") != EXPORT_KIND:
        raise InputError(f"not a pgra export (kind {spec.get('kind')!r})", path=directory / EXPORT_FILE)
    if not spec["index"]:
        return {}
    ix = spec["index"]
    path = Path(index) if index is not None else directory / "index" if ix["copied"] else Path(ix["path"])
    if not path.is_dir():
        raise InputError(f"the index is not at {path}: pass Pipeline.load(..., index=PATH) (its corpus must have "
                         f"content SHA-256 {ix['corpus_content_sha256']})", path=directory / EXPORT_FILE,
                         field="index")
    found = Index(path, device=device, trust_remote_code=trust_remote_code)
    if found.corpus.fingerprint != ix["corpus_content_sha256"]:
        raise StaleArtifactError(f"index {path} holds another corpus than the one this export was trained with")
    reranking = None
    if spec["reranked"]:
        r = spec["reranked"]
        where = Path(lm) if lm is not None else directory / "lm" if r["copied_lm"] else r["lm"]
        reranking = Reranker.load(directory / "reranked", found.corpus, device, trust_remote_code, lm=where)
    return {"index": found, "k": int(spec["k"]), "exclude_query_text": bool(spec["exclude_query_text"]),
            "reranking": reranking, "excluded": frozenset(spec["excluded"])}


__all__ = ["EXPORT_FILE", "EXPORT_KIND", "export_run", "load_export", "model_card"]
