"""``Pipeline.load(run).predict(texts)``: retrieve, rerank and read raw texts exactly as the run did (the run's
manifests lead back to its data, candidates and index; a second stage replays itself from its folder)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from ..core.errors import InputError, StaleArtifactError, shorten
from ..core.verbosity import quiet_output
from ..methods import load_run, stage_kinds, stage_of_kind
from ..methods.reader_method import ReaderPredictor
from ..rerank.stage import candidates_of
from ..results.predictions import Predictor
from ..retrieval.candidates_stage import CandidatesStage
from ..retrieval.index import Index
from ..retrieval.retrieve import CANDIDATES_KIND, recorded_exclusions, search_candidates
from ..storage.artifacts import read_manifest, verify_run
from ..storage.provenance import check_run_data, run_data
from .export import EXPORT_FILE, check_encoder_given, load_export, read_export
from .hub import export_folder

if TYPE_CHECKING:
    from ..rerank.prompt_guided.full_search import FullSearchReplay
    from ..rerank.prompt_guided.in_memory import PromptGuidedReranker
    from ..rerank.stage import Replay


class Pipeline:
    """A finished run with the stages in front of it: raw texts in, labels, probabilities and evidence out."""

    def __init__(self, predictor: Predictor, index=None, k: int = 0, exclude_query_text: bool = False,
                 reranking: PromptGuidedReranker | Replay | FullSearchReplay | None = None, n_evidence: int = 0, excluded: Collection[str] = frozenset(),
                 verbose: bool = False) -> None:
        self.predictor, self.index, self.k, self.verbose = predictor, index, k, verbose
        self.exclude_query_text, self.reranking, self.n_evidence = exclude_query_text, reranking, n_evidence
        self.excluded = frozenset(excluded)  # corpus ids the run's retrieval never returned (exclude_ids)

    @property
    def task(self):
        return self.predictor.task

    @classmethod
    def load(cls, run_dir: str | Path, device: str | None = None, trust_remote_code: bool = False,
             index: str | Path | None = None, lm: str | Path | None = None, verbose: bool = False,
             encoder: str | Path | None = None) -> Pipeline:
        """Load a finished run (a reader run or a kNN-vote cell), or a folder ``pgra export`` wrote (or the Hugging
        Face Hub id ``USER/NAME`` of one uploaded, downloaded with ``huggingface_hub``), and the index, LM and
        settings it used. ``trust_remote_code``: let the encoder and LMs run their own code; what the run's
        manifests recorded never does (a model that ran with its own code is refused without it).
        ``index`` / ``encoder`` / ``lm``: an export's index, the index's query encoder and its second stage's model
        (the reranking LM, a cross-encoder's or UPR's model) where they are on this machine (when it holds no copy), each refused when it holds other files than the run used
        (``encoder`` also applies to a run whose index's encoder moved). ``verbose``: show the libraries' progress
        bars, load reports and expected warnings here and in :meth:`predict` (quiet by default, as the CLI is)."""
        with quiet_output(verbose):
            return cls._load(export_folder(run_dir), device, trust_remote_code, index, lm, verbose, encoder)

    @classmethod
    def _load(cls, run: Path, device: str | None, trust_remote_code: bool, index: str | Path | None,
              lm: str | Path | None, verbose: bool, encoder: str | Path | None = None) -> Pipeline:
        exported = (run / EXPORT_FILE).exists() or (run / EXPORT_FILE).is_symlink()
        spec = read_export(run) if exported else None  # a hand-edited export.json: refused before any model loads
        verify_run(run)  # a truncated best/model.safetensors: one error line, not a loader's traceback
        predictor = load_run(run, device=device, trust_remote_code=trust_remote_code)
        # the kNN vote searches its own index; a reader of no evidence reads the text alone
        if not isinstance(predictor, ReaderPredictor) or (n := predictor.n_passages) == 0:
            return cls(predictor, verbose=verbose)
        if spec is not None:
            return cls(predictor, n_evidence=n, verbose=verbose,
                       **load_export(run, device, trust_remote_code, index, lm, spec, encoder))
        data = run_data(run, read_manifest(run, "reader"))
        check_run_data(run, data, "re-run the experiment (or pgra train) to predict with evidence from this folder")
        reranked = None
        manifest = read_manifest(data, stage_kinds())
        stage = stage_of_kind(manifest["kind"])
        if manifest["kind"] != CANDIDATES_KIND:  # a second stage's folder: it read these candidates
            if not stage.replayable:  # refused before any model loads
                raise stage.not_replayable(data)
            reranked, data = data, candidates_of(data, manifest)
        cand = CandidatesStage.open(data)
        excluded = recorded_exclusions(cand, data)  # refused before any model loads when its file changed
        check_encoder_given(encoder, cand["index"])
        index = Index(cand["index"]["path"], encoder=None if encoder is None else str(encoder), device=device,
                      trust_remote_code=trust_remote_code)
        if index.corpus.fingerprint != cand["index"]["corpus_content_sha256"]:
            raise StaleArtifactError(f"index {cand['index']['path']} holds another corpus than the one {data} was "
                                     "retrieved from")
        # the stage that wrote the folder does its work again on new texts
        reranking = stage.replay(reranked, manifest, index, device, trust_remote_code) if reranked else None
        return cls(predictor, index, int(cand["k"]), bool(cand["config"].get("exclude_query_text")), reranking, n,
                   excluded, verbose)

    def retrieve(self, texts: list[str]) -> list[list[dict[str, Any]]]:
        """The evidence each text gets (first stage, then the reranker when the run used one)."""
        with quiet_output(self.verbose):
            found = search_candidates(self.index, texts, self.k, self.exclude_query_text, self.excluded)
            hits = [kept for kept, _ in found]  # the retrieve stage's own search, the run's exclusions included
            return self.reranking.rerank(texts, hits) if self.reranking is not None else hits

    @overload
    def predict(self, texts: str, batch_size: int = 64) -> dict[str, Any]: ...

    @overload
    def predict(self, texts: Sequence[str], batch_size: int = 64) -> list[dict[str, Any]]: ...

    def predict(self, texts: str | Sequence[str], batch_size: int = 64) -> dict[str, Any] | list[dict[str, Any]]:
        """Per text: ``{"text", "prediction", "scores": {label: p}, "evidence": [{"id", "text", "score"}]}``.

        ``texts``: a list (or tuple) of texts gives a list of predictions, one per text; a single ``str`` is one
        text and gives its one prediction (not a list), as sentence-transformers' ``encode`` does for a str.
        ``batch_size``: texts per batch, a whole number from 1. Anything else (a bool, 0, a text that is not a
        str or is empty) is an :class:`pgra.InputError` naming ``batch_size`` or ``text``."""
        if isinstance(texts, str):
            return self.predict([texts], batch_size)[0]
        _check_batch(texts, batch_size)
        with quiet_output(self.verbose):
            return self._predict(texts, batch_size)

    def _predict(self, texts: Sequence[str], batch_size: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for start in range(0, len(texts), batch_size):
            chunk = list(texts[start:start + batch_size])
            bad = [i + start for i, t in enumerate(chunk) if not t.strip()]
            if bad:
                raise InputError(f"input {bad[0] + 1} is empty", field="text")
            records = [{"id": f"input-{start + i}", "text": t} for i, t in enumerate(chunk)]
            if self.index is not None:
                for rec, ctxs in zip(records, self.retrieve(chunk), strict=True):
                    rec["ctxs"] = ctxs
            for rec, line in zip(records, self.predictor.predict(records), strict=True):
                out.append({"text": rec["text"], "prediction": line["prediction"], "scores": line["scores"],
                            "evidence": self.predictor.evidence_of(rec, line)})
        return out


def _check_batch(texts: Any, batch_size: Any) -> None:
    """``texts`` is a list or tuple of str and ``batch_size`` a whole number from 1 (an InputError otherwise)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"must be a whole number from 1, got {shorten(batch_size)}", field="batch_size")
    if not isinstance(texts, (list, tuple)):
        raise InputError(f"texts must be a str or a list of str, got {type(texts).__name__}", field="text")
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise InputError(f"input {bad + 1} is a {type(texts[bad]).__name__}, not a str", field="text")


__all__ = ["Pipeline"]
