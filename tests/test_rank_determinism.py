"""Issue 49, item 11: a dense stage's files are the same bytes on 1 or N ranks (at the same thread count).

A query (retrieval) or an evidence sentence (reranking) is computed in a fixed chunk of its split or rows whatever
the number of ranks, so it is padded and multiplied beside the same other texts, and each query's candidates are
ordered by score, then by lower corpus position.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pgra.retrieval.index import DenseConfig, Index, IndexConfig, build_index
from pgra.retrieval.retrieve import by_score_then_position, chunk_place, query_chunks, search_candidates
from tests.conftest import SENTENCES, launch_failure

ROOT = Path(__file__).resolve().parents[1]
SPLITS = ("train", "dev", "test")


def _run_one_and_two_ranks(script: str, args: list[str], out: Path, cwd: Path,
                           own: dict[str, list[str]] | None = None) -> tuple[Path, Path]:
    """``script`` as one plain process (into ``out/one``) and as 2 torchrun ranks, gloo (``out/two``), both at 1
    thread a process; ``own``: each run's own extra arguments."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the same thread count in both runs
    runs = {"one": [sys.executable], "two": [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                             "--nproc_per_node", "2"]}
    for name, launch in runs.items():
        cmd = [*launch, str(ROOT / "scripts" / script), *args, *(own or {}).get(name, []), "--out", str(out / name)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=cwd)
        assert proc.returncode == 0, launch_failure(proc)
    return out / "one", out / "two"


@pytest.mark.distributed
def test_dense_candidates_are_the_same_bytes_on_one_and_two_ranks(corpus_txt, tmp_path, tiny_bert, sky_task):
    """The tiny BERT's scores are near-tied (all close to 1), so a query encoded beside other queries (its padding
    and matrix shapes) used to move in the last bits and swap candidates between 1 and 2 ranks."""
    index = build_index(IndexConfig(corpus=str(corpus_txt), out=str(tmp_path / "idx"), show_progress=False,
                                    dense=DenseConfig(encoder=str(tiny_bert), batch_size=4, shard_size=5)))
    args = ["--task", str(sky_task), "--index", str(index), "-k", "10", "--no-show-progress",
            "--query-batch-size", "4"]  # the 12 training inputs: chunks 0 and 2 on rank 0, chunk 1 on rank 1
    one, two = _run_one_and_two_ranks("retrieve.py", args, tmp_path, tmp_path)
    for split in SPLITS:
        assert (two / f"{split}.jsonl").read_bytes() == (one / f"{split}.jsonl").read_bytes(), split
    assert json.loads((one / "manifest.json").read_text())["counts"]["train"] == 12
    assert not (two / ".parts").exists()


@pytest.mark.distributed
def test_reranked_files_are_the_same_bytes_on_one_and_two_ranks(candidates, tmp_path, tiny_opt):
    """The evidence rows of the shared prompt are embedded in fixed chunks (``--chunk-size``) dealt round-robin,
    not in chunks of each rank's round-robin share of the rows."""
    args = ["--candidates", str(candidates), "--lm", str(tiny_opt), "--top-d", "4", "--num-demos", "4",
            "--no-show-progress", "--chunk-size", "8"]
    # each run its own empty cache: a warm cache's rows are whatever chunk first embedded them
    own = {name: ["--cache-dir", str(tmp_path / f"cache-{name}")] for name in ("one", "two")}
    one, two = _run_one_and_two_ranks("rerank.py", args, tmp_path / "reranked", tmp_path, own)
    assert json.loads((one / "manifest.json").read_text())["embedding"]["evidence_rows"] > 8  # chunks on both ranks
    for split in SPLITS:
        assert (two / f"{split}.jsonl").read_bytes() == (one / f"{split}.jsonl").read_bytes(), split


@pytest.mark.parametrize("n,size,writers", [(0, 4, 2), (1, 4, 3), (12, 4, 2), (13, 4, 2), (30, 7, 4), (5, 256, 8)])
def test_fixed_chunks_merge_back_into_input_order(n, size, writers):
    """Each rank's records (its chunks c % writers == rank, in order) put back in input order by chunk_place."""
    records = {r: [] for r in range(writers)}
    for rank in range(writers):
        for c in range(rank, query_chunks(n, size), writers):
            records[rank].extend(range(c * size, min(n, (c + 1) * size)))
    assert sorted(i for r in records.values() for i in r) == list(range(n))
    assert [records[r][j] for r, j in (chunk_place(i, size, writers) for i in range(n))] == list(range(n))


def test_tied_candidates_come_by_corpus_position(tmp_path, tiny_bert):
    """faiss keeps the lowest positions among hits tied at the cut, but lists them highest position first: the
    candidates now come by score, then by lower position (the corpus's own order, as the merge of split indexes)."""
    dup = SENTENCES[3]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join([dup, *SENTENCES[:3], dup, *SENTENCES[4:], dup, dup]) + "\n")
    index = Index(build_index(IndexConfig(corpus=str(corpus), out=str(tmp_path / "idx"), show_progress=False,
                                          dense=DenseConfig(encoder=str(tiny_bert), batch_size=64))))
    (hits, _), = search_candidates(index, [dup], 6)
    tied = [h for h in hits if h["score"] == hits[0]["score"]]
    assert len(tied) == 4  # the four copies score exactly alike
    assert [h["id"] for h in tied] == sorted(h["id"] for h in tied)
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_ordering_keeps_the_scores_dtype_and_puts_missing_last():
    scores = np.array([[1.5, 2.0, 1.5, -np.inf], [0.25, 0.25, 0.25, 0.25]], dtype=np.float64)
    positions = np.array([[9, 4, 2, -1], [7, 3, 5, 1]], dtype=np.int64)
    s, p = by_score_then_position(scores, positions)
    assert s.dtype == np.float64  # BM25's float64 scores are not rounded to float32
    assert p.tolist() == [[4, 2, 9, -1], [1, 3, 5, 7]]
    assert s.tolist() == [[2.0, 1.5, 1.5, -np.inf], [0.25] * 4]
