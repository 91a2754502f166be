"""The reader's global batch on any number of processes: a batch the processes cannot divide trains with the
single process's losses and weights (and resumes exactly after a kill)."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from pgra.cli import main
from pgra.core.config import to_dict
from pgra.runtime.training import rank_share
from pgra.storage.artifacts import write_manifest
from tests import numerics
from tests.conftest import TASK, launch_failure

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("batch,world", [(4, 8), (3, 2), (8, 8), (16, 8), (1, 3), (7, 3)])
def test_rank_shares_cover_the_batch_once(batch, world):
    shares = [rank_share(batch, world, r) for r in range(world)]
    assert [i for s in shares for i in range(batch)[s]] == list(range(batch))
    sizes = [len(range(batch)[s]) for s in shares]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def _losses(run: Path) -> list[float]:
    return [json.loads(x)["loss"] for x in (run / "train_log.jsonl").read_text().splitlines()]


def _torchrun(n: int, out: Path, args: list[str], fault: str = "", accelerate: str = "") -> subprocess.CompletedProcess:
    """``scripts/train.py`` on ``n`` processes: torchrun, or ``accelerate launch`` with the shipped config
    ``configs/accelerate/<accelerate>.yaml`` (which leaves the process count to the launch)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PGRA_FAULT": fault}
    launcher = (["accelerate.commands.launch", "--config_file", str(ROOT / "configs" / "accelerate" / f"{accelerate}.yaml"),
                 "--num_processes", str(n)] if accelerate else
                ["torch.distributed.run", "--standalone", "--nproc_per_node", str(n)])
    cmd = [sys.executable, "-m", *launcher, str(ROOT / "scripts" / "train.py"), "--out", str(out), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.parametrize("name", ["multi_gpu", "deepspeed_zero2", "deepspeed_zero3"])
def test_accelerate_configs_leave_the_process_count_to_the_launch(name):
    config = yaml.safe_load((ROOT / "configs" / "accelerate" / f"{name}.yaml").read_text())
    assert "num_processes" not in config


def _same_run(single: Path, multi: Path, steps: int) -> None:
    a, b = _losses(single), _losses(multi)
    assert len(b) == steps
    assert b == numerics.close(a, depth=numerics.trained(steps, numerics.TINY_SEQ2SEQ))
    wa, wb = (load_file(str(run / "best" / "model.safetensors")) for run in (single, multi))
    assert wa.keys() == wb.keys()
    numerics.assert_close(numerics.flat(wb), numerics.flat(wa), depth=numerics.trained(steps, numerics.TINY_SEQ2SEQ))


@pytest.mark.distributed
def test_batch_of_4_on_8_processes_equals_one_process(reranked, tmp_path, tiny_t5):
    """The paper's TREC/MPQA batch on an 8-GPU node: ranks 4-7 hold no input and add nothing to the gradient."""
    args = ["--data", str(reranked), "--model", str(tiny_t5), "--n-passages", "2", "--batch-size", "4",
            "--max-steps", "2", "--eval-every", "0", "--learning-rate", "1e-3", "max_length=32", "test_split="]
    assert main(["train", "--out", str(tmp_path / "single"), *args]) == 0
    proc = _torchrun(8, tmp_path / "eight", args)
    assert proc.returncode == 0, launch_failure(proc)
    _same_run(tmp_path / "single", tmp_path / "eight", 2)


@pytest.mark.distributed
def test_batch_of_3_on_2_processes_with_accumulation_and_a_kill(reranked, tmp_path, tiny_t5):
    """Parts of 2 and 1 inputs whose targets differ in length ("sun" is one token, "old town" two), two batches
    accumulated per step, steps that span an epoch, a kill after the step-2 checkpoint: the resumed 2-process
    run (relaunched with the shipped multi-GPU accelerate config, on CPU here) has the uninterrupted single
    process's losses and weights."""
    task = dataclasses.replace(TASK, reader_words={"sky": "sun", "town": "old town"})
    write_manifest(reranked, {"kind": "reranked", "task": to_dict(task)})
    args = ["--data", str(reranked), "--model", str(tiny_t5), "--n-passages", "2", "--batch-size", "3",
            "--max-steps", "4", "--eval-every", "0", "--learning-rate", "1e-3", "max_length=32", "grad_accum=2",
            "save_every=2", "test_split="]
    assert main(["train", "--out", str(tmp_path / "single"), *args]) == 0
    killed = _torchrun(2, tmp_path / "two", args, fault="train.step@3")
    assert killed.returncode != 0, launch_failure(killed)
    assert [c.name for c in (tmp_path / "two" / "checkpoints").iterdir()] == ["step_2"]
    proc = _torchrun(2, tmp_path / "two", args, accelerate="multi_gpu")
    assert proc.returncode == 0, launch_failure(proc)
    assert "resuming from" in proc.stdout + proc.stderr
    _same_run(tmp_path / "single", tmp_path / "two", 4)
