"""2-process CPU builds (torchrun, gloo) must give the single-process index."""

import os
import subprocess
import sys
from pathlib import Path

import faiss
import pytest

from pgra.retrieval.index import DenseConfig, IndexConfig, build_index
from tests import numerics
from tests.conftest import launch_failure

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.distributed
def test_two_process_dense_build_equals_single_process(corpus_txt, tmp_path, tiny_bert):
    single = build_index(IndexConfig(corpus=str(corpus_txt), out=str(tmp_path / "single"), show_progress=False,
                                     dense=DenseConfig(encoder=str(tiny_bert), batch_size=4, shard_size=5)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "scripts" / "build_index.py"), "--corpus", str(corpus_txt), "--encoder", str(tiny_bert),
           "--out", str(tmp_path / "multi"), "--batch-size", "4", "--shard-size", "5"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, launch_failure(proc)
    a = faiss.read_index(str(single / "index.faiss"))
    b = faiss.read_index(str(tmp_path / "multi" / "index.faiss"))
    numerics.assert_close(a.reconstruct_n(0, a.ntotal), b.reconstruct_n(0, b.ntotal), depth=numerics.TINY_MODEL)
    assert not (tmp_path / "multi" / ".build").exists()
    assert (tmp_path / "multi" / "manifest.json").exists()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_nodes(script: str, args: list[str], run_id: str) -> None:
    """Two `torchrun --nnodes 2` launches (one process each) joined by a c10d rendezvous, as on two machines."""
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
           str(ROOT / "scripts" / script), *args]
    nodes = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for node in nodes:
        _, err = node.communicate(timeout=300)
        assert node.returncode == 0, err[-3000:]


@pytest.mark.distributed
def test_two_nodes_build_and_rerank_equal_one_process(corpus_txt, tmp_path, tiny_bert, tiny_opt, candidates):
    """The multi-node launch (rendezvous on the first node, a shared filesystem): the index build splits its
    shards and the reranker fills disjoint rows of one shared embedding cache, with the single-process results."""
    import json

    from pgra.rerank.reranker import RerankConfig, rerank

    single = build_index(IndexConfig(corpus=str(corpus_txt), out=str(tmp_path / "single"), show_progress=False,
                                     dense=DenseConfig(encoder=str(tiny_bert), batch_size=4, shard_size=5)))
    _two_nodes("build_index.py", ["--corpus", str(corpus_txt), "--encoder", str(tiny_bert), "--out",
                                  str(tmp_path / "nodes"), "--batch-size", "4", "--shard-size", "5"], "index")
    a = faiss.read_index(str(single / "index.faiss"))
    b = faiss.read_index(str(tmp_path / "nodes" / "index.faiss"))
    numerics.assert_close(a.reconstruct_n(0, a.ntotal), b.reconstruct_n(0, b.ntotal), depth=numerics.TINY_MODEL)

    common = {"candidates": str(candidates), "lm": str(tiny_opt), "top_d": 3, "num_demos": 2, "show_progress": False}
    one = rerank(RerankConfig(**common, out=str(tmp_path / "r1"), cache_dir=str(tmp_path / "c1")))
    _two_nodes("rerank.py", ["--candidates", str(candidates), "--out", str(tmp_path / "r2"), "--lm", str(tiny_opt),
                             "--top-d", "3", "--num-demos", "2", "--cache-dir", str(tmp_path / "c2")], "rerank")
    m1, m2 = (json.loads((tmp_path / r / "manifest.json").read_text()) for r in ("r1", "r2"))
    assert m1["embedding"]["texts"] == m2["embedding"]["texts"]  # the two nodes embedded each text once together
    for split in ("train", "test"):
        x = [json.loads(line) for line in (one / f"{split}.jsonl").read_text().splitlines()]
        y = [json.loads(line) for line in (tmp_path / "r2" / f"{split}.jsonl").read_text().splitlines()]
        numerics.assert_same_rankings([r["ctxs"] for r in y], [r["ctxs"] for r in x], depth=numerics.TINY_MODEL)


_LATE_RANK = """
import sys
import time

from pgra.distributed import gather_objects, init_distributed, main_computes, shutdown_distributed

ctx = init_distributed()
gather_objects(ctx, ctx.rank)  # both ranks in step
if ctx.rank == 1:
    time.sleep(float(sys.argv[1]))  # a rank whose cells ran longer
ranks = gather_objects(ctx, ctx.rank)
decided = main_computes(ctx, lambda: "decided")
ctx.barrier()
print(f"rank {ctx.rank}: {ranks} {decided}", flush=True)
shutdown_distributed()
"""


def _late_rank(tmp_path, late_s: float, env: dict[str, str]) -> subprocess.CompletedProcess:
    script = tmp_path / "late_rank.py"
    script.write_text(_LATE_RANK)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script),
           str(late_s)]
    clean = {k: v for k, v in os.environ.items() if k not in ("PGRA_DIST_TIMEOUT_S", "PGRA_DIST_WAIT_S")}
    return subprocess.run(cmd, env={**clean, "OMP_NUM_THREADS": "1", **env}, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


@pytest.mark.distributed
def test_ranks_that_meet_long_after_the_process_groups_timeout_still_finish(tmp_path):
    """pgra's exchanges (gather, main computes, barrier) wait PGRA_DIST_WAIT_S, not the process group's timeout
    (NCCL's watchdog in cells mode): a rank arriving well past a lowered PGRA_DIST_TIMEOUT_S is waited for, and
    only the exchanges' own wait, lowered, gives up on it."""
    # the group's timeout leaves 15 s for the ranks' start-up on busy cores; the late rank comes 30 s after
    ok = _late_rank(tmp_path, 30, {"PGRA_DIST_TIMEOUT_S": "15"})
    assert ok.returncode == 0, launch_failure(ok)
    assert "rank 0: [0, 1] decided" in ok.stdout and "rank 1: [0, 1] decided" in ok.stdout
    late = _late_rank(tmp_path, 12, {"PGRA_DIST_WAIT_S": "5"})
    assert late.returncode != 0
    assert "rank 0:" not in late.stdout


def test_the_distributed_timeouts_come_from_the_environment():
    from datetime import timedelta

    from pgra.distributed import dist_timeouts
    from pgra.errors import InputError

    assert dist_timeouts({}) == (timedelta(minutes=120), timedelta(days=7))
    assert dist_timeouts({"PGRA_DIST_TIMEOUT_S": "30", "PGRA_DIST_WAIT_S": "86400"}) == (
        timedelta(seconds=30), timedelta(days=1))
    for bad in ("0", "-5", "soon", "nan", "inf"):
        with pytest.raises(InputError, match="field 'PGRA_DIST_WAIT_S': must be a positive number of seconds"):
            dist_timeouts({"PGRA_DIST_WAIT_S": bad})
