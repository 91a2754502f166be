"""2-process CPU builds (torchrun, gloo) must give the single-process index."""

import os
import subprocess
import sys
from pathlib import Path

import faiss
import numpy as np
import pytest

from pgra.retrieval.index import DenseConfig, IndexConfig, build_index

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
    assert proc.returncode == 0, proc.stderr[-3000:]
    a = faiss.read_index(str(single / "index.faiss"))
    b = faiss.read_index(str(tmp_path / "multi" / "index.faiss"))
    np.testing.assert_allclose(a.reconstruct_n(0, a.ntotal), b.reconstruct_n(0, b.ntotal), atol=1e-6)
    assert not (tmp_path / "multi" / ".build").exists()
    assert (tmp_path / "multi" / "manifest.json").exists()
