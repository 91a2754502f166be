"""bench/gpu_accept.sh, the prepared GPU acceptance script, in CPU mode: every phase passes (the BM25 kernels
compiled first; one grid run by one process, by torchrun ranks sharing a device, by two jobs with a kill, after a
forged takeover, by local workers and under other launchers' variables, each byte for byte the reference; an LM
loaded; the reranking stage on one rank of two sharing a device; the reader loop; two reader cells side by side),
and the PASS/FAIL table and its JSON are written, with the scratch (fixtures, grids) outside $OUT. Its summary marks
a phase with no result (stopped at its time limit) as a FAIL; a machine whose nvidia-smi lists a GPU that torch
cannot use fails at once unless --cpu is given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def _driver():
    mod = load_script("bench/gpu_accept.py")
    return mod


@pytest.mark.distributed
def test_the_gpu_acceptance_script_passes_every_phase_in_cpu_mode(tmp_path):
    out, work = tmp_path / "accept", tmp_path / "work"
    env = {**os.environ, "OUT": str(out), "WORK": str(work), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_accept.sh"), "--cpu"], env=env, capture_output=True,
                          text=True, timeout=1800)
    report = json.loads((out / "gpu_accept.json").read_text())
    failed = {r["phase"]: (r["reason"], r["details"].get("failures")) for r in report["phases"]
              if r["status"] != "PASS"}
    assert proc.returncode == 0 and report["passed"], (failed, proc.stdout[-3000:])
    assert report["mode"] == "cpu"
    phases = {r["phase"]: r for r in report["phases"]}
    assert list(phases) == list(_driver().PHASES)
    for name, r in phases.items():  # each phase checked something, and everything it checked held
        assert r["checks"] and all(r["checks"].values()), name
    table = (out / "gpu_accept.txt").read_text().splitlines()
    n = len(phases)
    assert table[-1].startswith(f"all: {n} of {n} phases passed") and table[-1] in proc.stdout
    assert all(any(line.split()[:2] == [name, "PASS"] for line in table) for name in phases)
    # what the phases saw
    assert phases["kill_resume"]["details"]["killed_cell"] == "sky/fid/seed-1"
    assert set(phases["torchrun_shared"]["details"]["ran_by"].values()) <= {"rank 0", "rank 1"}
    assert set(phases["local_workers"]["details"]["ran_by"].values()) <= {"local-0", "local-1"}
    assert phases["lm_to_device"]["details"]["device"] == "cpu"
    assert phases["lm_to_device"]["details"]["model_bytes"] > 0 and phases["lm_to_device"]["details"]["rss_peak"] > 0
    assert phases["side_by_side"]["details"]["wall_ratio"] > 0
    assert phases["rerank_stage"]["details"]["processes"] == 2  # no GPU: both ranks embed
    assert phases["warm"]["checks"]["the kernels were cached"]
    # $OUT holds the table, the JSON and the logs; the fixtures and grids are the scratch folder's
    assert (work / "fixtures" / "opt" / "config.json").exists() and not (out / "fixtures").exists()
    assert not (out / "grids").exists() and not (out / "index").exists()
    assert sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) < 20 * 2**20
    assert "side by side / one after the other" in proc.stdout
    for name in phases:  # every phase's log
        assert (out / f"{name}.log").exists(), name


def test_the_summary_fails_a_phase_without_a_result(tmp_path, capsys):
    gpu_accept = _driver()
    (tmp_path / "phases").mkdir()
    (tmp_path / "mode.json").write_text(json.dumps({"mode": "cpu", "gpu": ""}))
    passed = {"phase": "env", "status": "PASS", "seconds": 1.0, "reason": "", "checks": {"torch imports": True},
              "details": {"mode": "cpu", "torch": "2.x"}}
    (tmp_path / "phases" / "env.json").write_text(json.dumps(passed))
    (tmp_path / "phases" / "fixtures.rc").write_text("124\n")  # killed by its time limit before it wrote a result
    assert gpu_accept.main(["--out", str(tmp_path), "summary"]) == 1
    report = json.loads((tmp_path / "gpu_accept.json").read_text())
    rows = {r["phase"]: r for r in report["phases"]}
    assert not report["passed"] and rows["env"]["status"] == "PASS"
    assert rows["fixtures"]["status"] == "FAIL" and rows["fixtures"]["reason"] == \
        "no result (exit 124; see fixtures.log)"
    assert rows["reference"]["reason"] == "not run"
    out = capsys.readouterr().out
    assert f"FAILED: 1 of {len(gpu_accept.PHASES)} phases passed" in out and (tmp_path / "gpu_accept.txt").read_text().strip() == out.strip()


def test_a_phase_passes_only_when_it_checked_something_and_all_held(tmp_path):
    gpu_accept = _driver()
    phase = gpu_accept.Phase(tmp_path, "reference", 60)
    assert phase.result()["status"] == "FAIL" and phase.result()["reason"] == "nothing checked"
    phase.check("exit 0", True)
    assert phase.result()["status"] == "PASS"
    phase.check("cells equal the reference byte for byte", False, ["sky/fid/seed-1: predictions_test.jsonl differs"])
    result = phase.result()
    assert result["status"] == "FAIL" and result["reason"] == "cells equal the reference byte for byte"
    assert result["details"]["failures"]["cells equal the reference byte for byte"] == [
        "sky/fid/seed-1: predictions_test.jsonl differs"]
    assert phase.result("ValueError: boom")["reason"] == "ValueError: boom"


def test_a_gpu_that_torch_cannot_use_fails_the_acceptance_at_once(tmp_path):
    """nvidia-smi lists a GPU (a script on the PATH stands in for it) and torch sees no CUDA (this CPU build):
    no "passed (cpu mode)", the env phase fails naming the cause, the rest is not run and the script exits 1."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU here")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n"
                   'case "$*" in *-L*) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)";;\n'
                   '  *) echo "0, NVIDIA H100 80GB HBM3, 550.54, Default, Disabled, 81559 MiB, 0 MiB";; esac\n')
    smi.chmod(0o755)
    out = tmp_path / "accept"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_accept.sh")], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "error: nvidia-smi -L lists 1 GPU(s) but torch" in proc.stdout and "--cpu" in proc.stdout
    report = json.loads((out / "gpu_accept.json").read_text())
    rows = {r["phase"]: r for r in report["phases"]}
    assert not report["passed"] and rows["env"]["status"] == "FAIL"
    assert all(rows[name]["reason"] == "not run" for name in _driver().PHASES[1:])
    assert proc.stdout.splitlines()[-1].startswith(f"FAILED: 0 of {len(rows)} phases passed")
