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

    from pgra.rerank.config import RerankConfig
    from pgra.rerank.stages import rerank

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

from pgra.runtime.distributed import gather_objects, init_distributed, main_computes, shutdown_distributed

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

    from pgra.core.errors import InputError
    from pgra.runtime.distributed import dist_timeouts

    assert dist_timeouts({}) == (timedelta(minutes=120), timedelta(days=7))
    assert dist_timeouts({"PGRA_DIST_TIMEOUT_S": "30", "PGRA_DIST_WAIT_S": "86400"}) == (
        timedelta(seconds=30), timedelta(days=1))
    for bad in ("0", "-5", "soon", "nan", "inf"):
        with pytest.raises(InputError, match="field 'PGRA_DIST_WAIT_S': must be a positive number of seconds"):
            dist_timeouts({"PGRA_DIST_WAIT_S": bad})


_STAGES_ON_ONE_GPU = """
import json
import os
import sys

import pgra.runtime.device

pgra.runtime.device.gpu_count = lambda: 1  # both ranks on one GPU (mocked: they compute on the CPU)
from pgra.rerank.prompt_guided import embedder

_init = embedder.LMEmbedder.__init__


def counted(self, *args, **kwargs):
    with open(sys.argv[2], "a") as f:
        f.write(os.environ["RANK"] + "\\n")
    _init(self, *args, **kwargs)


embedder.LMEmbedder.__init__ = counted
from pgra.core.config import from_dict
from pgra.runtime.distributed import init_distributed, shutdown_distributed
from pgra.experiment.config import experiment_config
from pgra.experiment.grid import Experiment
from pgra.experiment.workers import GridRun

cfg = from_dict(experiment_config(), json.loads(open(sys.argv[1]).read()), source=sys.argv[1])
ctx = init_distributed()
run = GridRun(Experiment(cfg), ctx)
run.index()
print(f"rank {ctx.rank}: {run.stages(cfg.tasks[0])}", flush=True)
shutdown_distributed()
"""


@pytest.mark.distributed
def test_ranks_sharing_a_gpu_load_a_stage_s_lm_once(tmp_path, tiny_opt):
    """torchrun --nproc-per-node 2 with cells_per_gpu 2 on one GPU (mocked: the ranks compute on the CPU): the
    reranked stage's LM is loaded by one rank, the other waits for it (before, each rank loaded a copy on the one
    GPU: two OPT-13b on an 80 GB card)."""
    import json

    from tests.conftest import write_corpus, write_sky_task

    values = {"tasks": [str(write_sky_task(tmp_path))], "methods": ["pgra"], "seeds": [1], "out": str(tmp_path / "x"),
              "index": {"corpus": str(write_corpus(tmp_path)), "out": str(tmp_path / "index"), "retriever": "bm25"},
              "retrieve": {"k": 6}, "rerank": {"lm": str(tiny_opt), "num_demos": 2, "top_d": 3,
                                               "cache_dir": str(tmp_path / "cache")},
              "cells_per_gpu": 2, "show_progress": False}
    (tmp_path / "grid.json").write_text(json.dumps(values))
    (tmp_path / "stages.py").write_text(_STAGES_ON_ONE_GPU)
    loads = tmp_path / "loads.txt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(tmp_path / "stages.py"), str(tmp_path / "grid.json"), str(loads)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, launch_failure(proc)
    assert "rank 0: ready" in proc.stdout and "rank 1: ready" in proc.stdout
    assert loads.read_text().split() == ["0"]  # one LM on the one GPU, loaded by rank 0
    stage = tmp_path / "x" / "sky" / "reranked"
    assert json.loads((stage / "manifest.json").read_text())["counts"]
    assert json.loads((stage / "cost.json").read_text())["processes"] == 1


@pytest.mark.parametrize(("env", "address", "said"), [
    ({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}, "127.0.1.1", True),     # two nodes, Debian's /etc/hosts
    ({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}, None, True),            # the name does not resolve
    ({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}, "10.1.2.3", False),     # a routable address
    ({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "GLOO_SOCKET_IFNAME": "ib0"}, "127.0.1.1", False),
    ({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8"}, "127.0.1.1", False),     # one node: loopback reaches every rank
    ({"WORLD_SIZE": "2", "SLURM_NNODES": "2"}, "127.0.0.1", True),          # srun, one rank a node
    ({"WORLD_SIZE": "2", "SLURM_NNODES": "1"}, "127.0.0.1", False),
])
def test_a_multi_node_job_whose_hostname_is_loopback_is_told_to_set_gloo_socket_ifname(env, address, said):
    from pgra.runtime.distributed import gloo_interface_problem

    def resolve(host: str) -> str:
        if address is None:
            raise OSError("Name or service not known")
        return address

    problem = gloo_interface_problem(env, resolve)
    assert (problem is not None) is said
    if said:
        assert "GLOO_SOCKET_IFNAME" in problem and "\n" not in problem


def test_an_embedding_cache_written_by_ranks_on_several_hosts_is_refused(tmp_path, monkeypatch):
    """The reranker's memory-mapped cache is written in place: ranks on two nodes (hostnames mocked) are refused in
    one line naming cache_dir, before anything is written; ranks on one host open it."""
    from pgra.core.errors import InputError
    from pgra.rerank.prompt_guided import corpus_pass
    from pgra.runtime.distributed import DistContext

    key = {"lm": "x", "rows": "queries:test"}
    monkeypatch.setattr(corpus_pass, "gather_objects", lambda ctx, obj: ["node1", "node0"])
    with pytest.raises(InputError, match=r"field 'cache_dir': the embedding cache .* ranks on 2 hosts \(node0, node1\)"
                       ) as refused:
        corpus_pass.open_cache(DistContext(0, 2), str(tmp_path / "cache"), key, 4, 8)
    assert "\n" not in str(refused.value) and "--nnodes 1" in str(refused.value)
    assert not (tmp_path / "cache").exists()
    monkeypatch.setattr(corpus_pass, "gather_objects", lambda ctx, obj: ["node0", "node0"])
    monkeypatch.setattr(DistContext, "barrier", lambda self: None)
    assert corpus_pass.open_cache(DistContext(0, 2), str(tmp_path / "cache"), key, 4, 8).directory.exists()


def test_joining_a_multi_node_launch_on_a_loopback_hostname_warns_once_a_node(monkeypatch, capsys):
    """init_distributed says it in one warning line (LOCAL_RANK 0 only) before the groups are made."""
    from pgra.runtime import distributed

    made = []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: bool(made))
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda **kw: made.append("main"))
    monkeypatch.setattr(distributed.dist, "new_group", lambda **kw: made.append("gloo"))
    monkeypatch.setattr(distributed.dist, "get_rank", lambda: 0)
    monkeypatch.setattr(distributed.dist, "get_world_size", lambda: 16)
    monkeypatch.setattr(distributed.socket, "gethostbyname", lambda host: "127.0.1.1")  # Debian's /etc/hosts
    monkeypatch.setattr(distributed, "_exchanges", None)
    for k, v in {"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    distributed.init_distributed()
    err = capsys.readouterr().err
    assert made == ["main", "gloo"]
    assert [line for line in err.splitlines() if "GLOO_SOCKET_IFNAME" in line][0].startswith("warning: ")
