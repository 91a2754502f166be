"""One grid, many processes: cells side by side under torchrun, independent jobs sharing one experiment folder
through claims (a killed job's cell taken over and resumed), and the local / submitit launchers. Every cell runs
once, and its key, predictions (float scores included, byte for byte) and metrics are those of a 1-process run."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pgra.core.faults import ENV, KILLED_EXIT
from tests.conftest import launch_failure, write_corpus, write_sky_task

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["sky", "sky2", "sky3", "sky4"]
METHODS = ["fid", "knn_vote"]  # 4 tasks x 2 methods x seed 1 = 8 cells, 4 of them readers
PREDICTIONS = ("predictions_dev.jsonl", "predictions_test.jsonl")


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_t5):
    """The task, corpus and index shared by the grids of this module, and a 1-process reference run."""
    root = tmp_path_factory.mktemp("jobs")
    sky = write_sky_task(root)
    tasks = [sky]
    for name in TASKS[1:]:  # the same data under other names
        tasks.append(root / f"{name}.yaml")
        tasks[-1].write_text(yaml.safe_dump({**yaml.safe_load(sky.read_text()), "name": name}))
    base = {"tasks": [str(t) for t in tasks], "methods": METHODS, "seeds": [1],
            "index": {"corpus": str(write_corpus(root)), "out": str(root / "index"), "retriever": "bm25"},
            "retrieve": {"k": 6}, "knn_vote": {"k": 3}, "show_progress": False, "report": True,
            "claim_poll_s": 0.5,
            "reader": {"model": str(tiny_t5), "n_passages": 2, "max_length": 32, "batch_size": 4, "max_steps": 3,
                       "eval_every": 0, "save_every": 1, "eval_batch_size": 8, "learning_rate": 1e-3}}
    ref = _config(root, base, "ref")
    proc = _pgra(["experiment", "--config", str(ref)])
    assert proc.wait(timeout=600) == 0
    return root, base


def _config(root: Path, base: dict, name: str, **kw) -> Path:
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**base, "out": str(root / name), **kw}))
    return path


def _env(**extra) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1",  # the same threads everywhere: byte-identical floats
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **extra}


def _pgra(argv: list[str], log: Path | None = None, **env) -> subprocess.Popen:
    out = open(log, "w") if log else None  # noqa: SIM115 (closed with the process)
    return subprocess.Popen([sys.executable, "-c", "import sys; from pgra.cli import main; sys.exit(main(sys.argv[1:]))",
                             *argv], env=_env(**env), stdout=out,
                            stderr=subprocess.STDOUT if out else None, text=True)


def _cells(out: Path) -> dict[str, Path]:
    return {"/".join(p.parent.parts[-3:]): p.parent for p in sorted(out.glob("*/*/seed-*/cell.json"))}


def _same_as_reference(root: Path, name: str) -> dict[str, dict]:
    """Every cell of ``name`` finished with the reference's key, predictions and metrics; the cell records."""
    ref, got = _cells(root / "ref"), _cells(root / name)
    assert sorted(got) == sorted(ref) and len(ref) == 8
    records = {}
    for label, folder in got.items():
        _same_cell(folder, ref[label], label)
        records[label] = json.loads((folder / "cell.json").read_text())
        assert records[label]["results"] == json.loads((ref[label] / "cell.json").read_text())["results"], label
    assert (root / name / "results.md").exists()
    return records


def _same_cell(folder: Path, ref: Path, label: str) -> None:
    """The cell ``folder`` has ``ref``'s key and predictions, byte for byte."""
    assert (folder / ".cell_key").read_bytes() == (ref / ".cell_key").read_bytes(), label
    for f in PREDICTIONS:
        assert (folder / f).read_bytes() == (ref / f).read_bytes(), (label, f)


def _started(text: str) -> list[str]:
    """The cells a run's output says it started (``[label] running`` / ``resuming``), found anywhere in a line:
    several ranks writing to one pipe can put another rank's text between a message and its newline."""
    return re.findall(r"\[([^\s\[\]]+/seed-\d+)\] (?:running|resuming)\b", text)


@pytest.mark.distributed
def test_torchrun_runs_cells_side_by_side_like_one_process(setup):
    root, base = setup
    path = _config(root, base, "ranks")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4",
           str(ROOT / "scripts" / "experiment.py"), "--config", str(path)]
    # unbuffered: each message reaches the shared pipe in one write (a rank's buffered block could cut one in two)
    proc = subprocess.run(cmd, env=_env(PYTHONUNBUFFERED="1"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, launch_failure(proc)
    records = _same_as_reference(root, "ranks")
    started = _started(proc.stdout)
    assert sorted(started) == sorted(records)  # each cell once
    workers = {r["ran_by"]["worker"] for r in records.values()}
    assert len(workers) >= 2 and workers <= {f"rank {i}" for i in range(4)}, workers  # side by side
    assert len({r["ran_by"]["pid"] for r in records.values()}) == 8  # each in a single process of its own
    assert not list((root / "ranks").glob("**/.*.claim"))


@pytest.mark.distributed
def test_failed_cells_never_cost_a_torchrun_job_its_report(setup):
    """One task's reader fails at once (a model folder with a config and no weights) while the other task's reader
    trains on the other rank: the failing rank exits 1 only after rank 0 wrote the report, so torchrun (which kills
    a job's other ranks when one exits 1) never cuts the running cell or the report."""
    root, base = setup
    broken = root / "no-weights"
    broken.mkdir(exist_ok=True)
    shutil.copy(Path(base["reader"]["model"]) / "config.json", broken / "config.json")
    path = _config(root, base, "failing", tasks=base["tasks"][:2], methods=["fid"],
                   reader={**base["reader"], "max_steps": 60},
                   task_overrides={base["tasks"][1]: {"reader": {"model": str(broken)}}})
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "scripts" / "experiment.py"), "--config", str(path)]
    proc = subprocess.run(cmd, env=_env(PYTHONUNBUFFERED="1"), capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert sorted(_cells(root / "failing")) == ["sky/fid/seed-1"], launch_failure(proc)
    assert "sky" in (root / "failing" / "results.md").read_text(), launch_failure(proc)


@pytest.mark.distributed
def test_two_ranks_with_cells_per_gpu_2_finish_a_grid_like_one_process(setup):
    """torchrun --nproc-per-node 2 with cells_per_gpu 2 (two cells on one GPU; here, without one, on the CPU): both
    ranks run cells, each cell as the 1-process run computes it."""
    root, base = setup
    path = _config(root, base, "shared-gpu", tasks=base["tasks"][:2], cells_per_gpu=2, cell_gpu_gb=0.5)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "scripts" / "experiment.py"), "--config", str(path)]
    proc = subprocess.run(cmd, env=_env(PYTHONUNBUFFERED="1"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, launch_failure(proc)
    cells, ref = _cells(root / "shared-gpu"), _cells(root / "ref")
    assert sorted(cells) == sorted(f"{t}/{m}/seed-1" for t in TASKS[:2] for m in METHODS)
    for label, folder in cells.items():
        _same_cell(folder, ref[label], label)
    assert sorted(_started(proc.stdout)) == sorted(cells)  # each cell once
    workers = {json.loads((f / "cell.json").read_text())["ran_by"]["worker"] for f in cells.values()}
    # which rank ran which of the 4 cells is the claims' race (side by side is proved with 4 ranks and 8 cells
    # above; this test failed once in 5 runs on busy cores, not reproduced): here, only that no other worker ran one
    assert workers and workers <= {"rank 0", "rank 1"}, workers
    assert (root / "shared-gpu" / "results.md").exists()


def test_a_killed_job_s_cell_is_taken_over_and_resumed(setup):
    root, base = setup
    path = _config(root, base, "three")
    logs = [root / f"three-{i}.log" for i in range(3)]
    procs = [_pgra(["experiment", "--config", str(path)], log, **({ENV: "train.step@2"} if i == 0 else {}))
             for i, log in enumerate(logs)]
    codes = [p.wait(timeout=600) for p in procs]
    texts = [log.read_text() for log in logs]
    assert codes == [KILLED_EXIT, 0, 0], [t[-2000:] for t in texts]
    killed = _started(texts[0])[-1]  # the reader cell it was training
    assert "[fault injection] killed at train.step" in texts[0]
    records = _same_as_reference(root, "three")
    assert f"taking over the lock of process {procs[0].pid}" in texts[1] + texts[2]
    assert f"[{killed}] resuming" in texts[1] + texts[2]
    assert records[killed]["cost"]["resumed"] and records[killed]["ran_by"]["pid"] != procs[0].pid
    others = [c for t in texts[1:] for c in _started(t)]
    assert sorted(others + _started(texts[0])[:-1]) == sorted(records)  # every other cell once


@pytest.mark.parametrize("launcher", ["local", "slurm"])
def test_launcher_runs_workers_that_finish_the_grid(setup, launcher):
    if launcher == "slurm":
        pytest.importorskip("submitit")
    root, base = setup
    name = f"launch-{launcher}"
    grid = {"local": {"tasks": base["tasks"][:2]}, "slurm": {"tasks": base["tasks"][:2], "methods": ["knn_vote"]}}
    path = _config(root, base, name, **grid[launcher],
                   slurm={"cluster": "local", "gpus_per_worker": 0, "cpus_per_worker": 1})
    log = root / f"{name}.log"
    proc = _pgra(["experiment", "--config", str(path), "--launcher", launcher, "--workers", "2"], log)
    assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    cells = _cells(root / name)
    methods = grid[launcher].get("methods", METHODS)
    assert sorted(cells) == sorted(f"{t}/{m}/seed-1" for t in TASKS[:2] for m in methods)
    if launcher == "local":  # two `pgra experiment` processes started together: each cell once over both
        assert sorted(_started(log.read_text())) == sorted(cells)
    ref = _cells(root / "ref")
    for label, folder in cells.items():
        _same_cell(folder, ref[label], label)
    workers = {json.loads((f / "cell.json").read_text())["ran_by"]["worker"] for f in cells.values()}
    assert workers <= {f"{launcher}-0", f"{launcher}-1"}, workers
    assert (root / name / "results.md").exists()
    if launcher == "slurm":  # every worker ran (its log in submitit's folder)
        assert len(list((root / name / ".submitit").glob("*/*_result.pkl"))) == 2


def test_claims_skip_live_holders_and_take_over_dead_ones(tmp_path):
    from pgra.experiment.claims import claim_path, is_claimed, try_claim

    cell = tmp_path / "sky" / "fid" / "seed-1"
    held = try_claim(cell, "cell", stale_after=600)
    assert held is not None and claim_path(cell).exists()
    child = subprocess.run([sys.executable, "-c", "import sys; from pgra.storage.lock import OutputBusyError, hold_lock\n"
                            f"try:\n    with hold_lock({str(claim_path(cell))!r}, stale_after=600): sys.exit(1)\n"
                            "except OutputBusyError: sys.exit(0)"], env=_env(), timeout=120)
    assert child.returncode == 0  # another process cannot take a live holder's claim
    held.close()
    assert not claim_path(cell).exists()
    # another host's claim: kept while its heartbeat is fresh, taken over once older than stale_after
    info = {"pid": 1, "host": "node-17", "command": "pgra experiment", "started": time.time(), "job": "42_3"}
    claim_path(cell).write_text(json.dumps(info))
    assert is_claimed(cell, "cell", stale_after=60)
    old = time.time() - 120
    os.utime(claim_path(cell), (old, old))
    assert is_claimed(cell, "cell", stale_after=None)  # plain locks never guess another host dead
    assert not is_claimed(cell, "cell", stale_after=60)
    assert claim_path(cell).exists()  # only looked at: the claim is taken over by the job that claims the cell
    with try_claim(cell, "cell", stale_after=60):
        assert json.loads(claim_path(cell).read_text())["pid"] == os.getpid()
    assert not claim_path(cell).exists()


def test_a_held_claim_beats_and_records_the_slurm_job(tmp_path, monkeypatch):
    from pgra.storage.lock import hold_lock

    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "42")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    path = tmp_path / ".x.claim"
    with hold_lock(path, "test", stale_after=0.2):
        info = json.loads(path.read_text())
        assert info["job"] == "42_3" and info["host"] == socket.gethostname()
        old = time.time() - 100
        os.utime(path, (old, old))
        time.sleep(0.3)
        assert time.time() - path.stat().st_mtime < 5  # the heartbeat touched it


def test_cost_order_and_parallel_option_leave_keys_alone(setup):
    from pgra.core.config import from_dict
    from pgra.experiment import Experiment, ExperimentConfig
    from pgra.experiment.workers import cost_order

    root, base = setup
    cells = {}
    for parallel in ("cells", "ddp"):
        exp = Experiment(from_dict(ExperimentConfig, {**base, "out": str(root / "ref"), "parallel": parallel}))
        cells[parallel] = exp.plan()
    assert [c.key for c in cells["cells"]] == [c.key for c in cells["ddp"]]
    assert [c.method for c in cells["cells"]] == METHODS * 4  # planned task by task
    ordered = cost_order(cells["cells"], root / "ref")
    assert [(c.task, c.method) for c in ordered] == [(str(t), m) for m in METHODS for t in base["tasks"]]
    ordered = cost_order(cells["cells"][::-1], root / "ref")  # readers first, then the given order
    assert [(c.task, c.method) for c in ordered] == [(str(t), m) for m in METHODS for t in base["tasks"][::-1]]


def test_a_first_run_goes_by_the_plan(setup, monkeypatch):
    """With no finished cell the order is the dry run's (costliest planned first); a plan that cannot be priced
    falls back to the order without records (readers first, then plan order)."""
    from pgra.core.config import from_dict
    from pgra.core.errors import InputError
    from pgra.experiment import Experiment, ExperimentConfig, estimate
    from pgra.experiment.workers import cost_order

    root, base = setup
    exp = Experiment(from_dict(ExperimentConfig, {**base, "out": str(root / "first")}))
    cells = exp.plan()
    planned = [c.label for c in estimate.plan_order(exp, cells)]
    assert [c.label for c in cost_order(cells, exp.out, exp)] == planned
    monkeypatch.setattr(estimate, "plan_order", lambda e, c: c[::-1])  # a plan that orders otherwise is followed
    assert [c.label for c in cost_order(cells, exp.out, exp)] == [c.label for c in cells[::-1]]

    def unpriced(e, c):
        raise InputError("no fits")

    monkeypatch.setattr(estimate, "plan_order", unpriced)
    assert [c.label for c in cost_order(cells, exp.out, exp)] == [c.label for c in cost_order(cells, exp.out)]
    priced = []
    monkeypatch.setattr(estimate, "plan_order", lambda e, c: priced.append(1) or c[::-1])
    memo: dict[str, int] = {}  # a job's loop polls its cells again and again: the plan is priced once
    for _ in range(3):
        assert [c.label for c in cost_order(cells, exp.out, exp, memo)] == [c.label for c in cells[::-1]]
    assert priced == [1]


def test_slurm_launcher_without_submitit_says_how_to_install_it(setup, monkeypatch, capsys):
    from tests.conftest import one_error_line

    root, base = setup
    monkeypatch.setitem(sys.modules, "submitit", None)  # not installed
    path = _config(root, base, "no-submitit")
    line = one_error_line(["experiment", "--config", str(path), "--launcher", "slurm", "--workers", "2"], capsys)
    assert "--launcher slurm needs submitit: pip install 'submitit>=1.5'" in line
    assert not (root / "no-submitit").exists()


# ----- the "others busy?" probe only looks (issue 49 item 7) -----
def test_probing_a_claim_writes_nothing(tmp_path, monkeypatch):
    """is_claimed judges a claim as try_claim does (free, live, dead), without creating or removing a file."""
    import pgra.storage.lock as lock
    from pgra.experiment.claims import claim_path, is_claimed

    def no_writes(*args, **kwargs):
        raise AssertionError("the probe wrote a lock file")

    monkeypatch.setattr(lock, "_create", no_writes)
    monkeypatch.setattr(lock, "_remove_if_unchanged", no_writes)
    cell = tmp_path / "sky" / "fid" / "seed-1"
    assert not is_claimed(cell, "cell", stale_after=60)  # free
    assert not claim_path(cell).exists()
    claim_path(cell).parent.mkdir(parents=True)
    claim_path(cell).write_text(json.dumps({"pid": 1, "host": "node-17", "started": time.time()}))
    assert is_claimed(cell, "cell", stale_after=60)  # another host's, beating
    old = time.time() - 120
    os.utime(claim_path(cell), (old, old))
    assert not is_claimed(cell, "cell", stale_after=60)  # its heartbeat stopped: dead, but left for a claimer
    assert claim_path(cell).exists()


PROBES = '''
import multiprocessing as mp, sys
from pathlib import Path
from pgra.experiment.claims import is_claimed

root, workers, rounds = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
cells = [root / f"cell-{i}" for i in range(3)]

def probe(start, seen):
    busy = 0
    for _ in range(rounds):
        start.wait(60)  # every worker probes at once, as jobs that finish together do
        busy += sum(is_claimed(c, c.name, 600) for c in cells)
    seen.put(busy)

ctx = mp.get_context("fork")
start, seen = ctx.Barrier(workers), ctx.Queue()
procs = [ctx.Process(target=probe, args=(start, seen)) for _ in range(workers)]
for p in procs:
    p.start()
print(sum(seen.get(timeout=300) for _ in procs))
for p in procs:
    p.join()
'''


def test_jobs_probing_together_never_see_each_other_as_busy(tmp_path):
    """Four jobs finishing together each ask whether others still hold a stage or cell (to decide who writes the
    report): none holds one, so none may see one held (a probe that took each claim for a moment made them see
    each other's probes, and all skipped the report)."""
    proc = subprocess.run([sys.executable, "-c", PROBES, str(tmp_path), "4", "40"], env=_env(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == "0", proc.stdout
    assert not list(tmp_path.iterdir())


# ----- an invalid claim holds only its own cell (issue 53) -----
def test_an_invalid_claim_holds_only_its_cell_and_is_taken_over_naming_its_field(tmp_path, capsys):
    from pgra.experiment.claims import claim_path, is_claimed, try_claim

    bad, good = tmp_path / "sky" / "fid" / "seed-1", tmp_path / "sky" / "fid" / "seed-2"
    claim_path(bad).parent.mkdir(parents=True)
    claim_path(bad).write_text(json.dumps({"pid": 10**30, "host": socket.gethostname(), "started": "noon"}))
    assert try_claim(bad, "sky/fid/seed-1", stale_after=600) is None  # fresh: skipped, come back later
    assert is_claimed(bad, "sky/fid/seed-1", stale_after=600)
    other = try_claim(good, "sky/fid/seed-2", stale_after=600)  # every other cell goes on
    assert other is not None
    other.close()
    old = time.time() - 120
    os.utime(claim_path(bad), (old, old))
    assert not is_claimed(bad, "sky/fid/seed-1", stale_after=600)
    taken = try_claim(bad, "sky/fid/seed-1", stale_after=600)
    assert taken is not None
    taken.close()
    err = capsys.readouterr().err
    assert f"taking over an invalid (field 'pid' is {10**30}" in err and str(claim_path(bad)) in err


# ----- jobs sharing a folder share its settings (issue 53) -----
def _grid_config(root: Path, **change):
    from pgra.core.config import from_dict
    from pgra.experiment import ExperimentConfig

    data = {"out": str(root / "exp"), "tasks": [str(root / "sky.yaml")], "methods": ["knn_vote"], "seeds": [1],
            "index": {"corpus": str(root / "corpus.txt"), "out": str(root / "index"), "retriever": "bm25"},
            "knn_vote": {"k": 3}, "show_progress": False}
    for key, value in change.items():
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return from_dict(ExperimentConfig, data)


HOLD_REGISTRATION = '''
import json, sys, time
from pgra.storage.lock import hold_lock
with hold_lock(sys.argv[1], "pgra experiment", stale_after=600, extra={"settings": json.loads(sys.argv[2])}):
    print("held", flush=True)
    time.sleep(120)
'''


def test_a_job_with_other_settings_is_refused_naming_the_setting(tmp_path):
    """Job A runs the folder with knn_vote.k=3; job B with k=5 would find A's cells stale and rerun them (and A
    B's): B is refused before it writes anything, naming the setting. A job that differs only in the grid's extent
    (methods, seeds) shares the folder; once A is gone, B runs."""
    from pgra.core.errors import InputError
    from pgra.experiment import Experiment
    from pgra.runtime.distributed import DistContext

    write_sky_task(tmp_path)
    write_corpus(tmp_path)
    a = Experiment(_grid_config(tmp_path))
    a.out.mkdir()
    job = a.out / ".job-forA.claim"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_REGISTRATION, str(job), json.dumps(a.shared_settings())],
                              stdout=subprocess.PIPE, text=True, env=_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        before = sorted(p.name for p in a.out.iterdir())
        b = Experiment(_grid_config(tmp_path, **{"knn_vote.k": 5}))
        with pytest.raises(InputError, match=r"field 'knn_vote\.k': .* knn_vote\.k is 3 there, 5 here"), \
                b.sharing(DistContext()):
            pass
        assert sorted(p.name for p in a.out.iterdir()) == before  # nothing written, A's registration kept
        same = Experiment(_grid_config(tmp_path, methods=["knn_vote", "no_retrieval"], seeds=[1, 2]))
        with same.sharing(DistContext()):
            assert len(list(a.out.glob(".job-*.claim"))) == 2  # both registered
        assert sorted(p.name for p in a.out.iterdir()) == before
    finally:
        holder.kill()
        holder.wait()
    with b.sharing(DistContext()):  # A died: its registration is judged dead and removed
        assert len(list(a.out.glob(".job-*.claim"))) == 1
    assert not list(a.out.glob(".job-*.claim"))


# ----- --launcher slurm (issue 53, issue 49 items 8 and 15) -----
def test_slurm_launcher_without_slurm_is_one_error_line(tmp_path, monkeypatch, capsys):
    from tests.conftest import one_error_line

    pytest.importorskip("submitit")
    write_sky_task(tmp_path)
    write_corpus(tmp_path)
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no sbatch, no srun
    line = one_error_line(["experiment", "--out", str(tmp_path / "exp"), f"tasks={tmp_path / 'sky.yaml'}",
                           f"index.corpus={tmp_path / 'corpus.txt'}", f"index.out={tmp_path / 'index'}",
                           "index.retriever=bm25", "--launcher", "slurm", "--workers", "2"], capsys)
    assert "field 'launcher'" in line and "no Slurm" in line and "srun" in line
    assert not (tmp_path / "exp").exists() and not (tmp_path / "index").exists()


def test_slurm_workers_get_their_cpus_in_srun_and_say_their_memory(tmp_path, monkeypatch, capsys):
    """The parameters submitit gets: the job's CPUs passed on to its srun step (SRUN_CPUS_PER_TASK, which Slurm
    22.05-23.02 do not set from --cpus-per-task), memory asked only when given, and said when submitting."""
    import types

    from pgra.experiment import launch
    from pgra.experiment.config import SlurmConfig

    params = launch.slurm_parameters(SlurmConfig(cpus_per_worker=6, partition="gpu"))
    assert params["slurm_setup"] == ["export SRUN_CPUS_PER_TASK=6"] and params["cpus_per_task"] == 6
    assert "mem_gb" not in params and params["slurm_partition"] == "gpu"
    assert launch.slurm_parameters(SlurmConfig(mem_gb=32))["mem_gb"] == 32
    local = launch.slurm_parameters(SlurmConfig(cluster="local", gpus_per_worker=2), devices_here=1)
    assert "slurm_setup" not in local and local["gpus_per_node"] == 1

    seen: dict = {}

    class Executor:  # submitit's AutoExecutor, recording what it is given
        def __init__(self, folder, cluster):
            seen["cluster"] = cluster

        def update_parameters(self, **kw):
            seen.update(kw)

        def submit(self, fn, *args):
            return types.SimpleNamespace(job_id=f"{len(seen)}")

    monkeypatch.setitem(sys.modules, "submitit", types.SimpleNamespace(AutoExecutor=Executor))
    for tool in ("sbatch", "srun"):
        (tmp_path / tool).write_text("#!/bin/sh\n")
        (tmp_path / tool).chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    cfg = types.SimpleNamespace(launcher="slurm", out=str(tmp_path / "exp"), workers=2,
                                slurm=SlurmConfig(cpus_per_worker=4, wait=False))
    assert launch._slurm({}, cfg) is None
    assert seen["slurm_setup"] == ["export SRUN_CPUS_PER_TASK=4"] and "mem_gb" not in seen
    out = capsys.readouterr().out
    assert "submitted 2 worker(s)" in out and "no memory asked (slurm.mem_gb: 0)" in out and "DefMemPerCPU" in out


# ----- a dead job's cell taken over from another host (issue 49 item 1) -----
def test_a_dead_job_s_cell_is_taken_over_from_another_host(tmp_path, tiny_t5):
    """A job killed mid-cell on "another host" (its claim and the reader's `.pgra-lock` in the cell say node-17,
    their heartbeat stopped long ago): the next job takes over the claim and the lock, and resumes the cell."""
    write_sky_task(tmp_path)
    config = tmp_path / "grid.yaml"
    config.write_text(yaml.safe_dump({
        "out": str(tmp_path / "exp"), "tasks": [str(tmp_path / "sky.yaml")], "methods": ["fid"], "seeds": [1],
        "index": {"corpus": str(write_corpus(tmp_path)), "out": str(tmp_path / "index"), "retriever": "bm25"},
        "retrieve": {"k": 6}, "show_progress": False, "report": False, "claim_stale_after_s": 60,
        "reader": {"model": str(tiny_t5), "n_passages": 2, "max_length": 32, "batch_size": 4, "max_steps": 3,
                   "eval_every": 0, "save_every": 1, "eval_batch_size": 8, "learning_rate": 1e-3}}))
    killed = _pgra(["experiment", "--config", str(config)], tmp_path / "killed.log", **{ENV: "train.step@2"})
    assert killed.wait(timeout=600) == KILLED_EXIT, (tmp_path / "killed.log").read_text()[-3000:]
    cell = tmp_path / "exp" / "sky" / "fid" / "seed-1"
    old = time.time() - 3600
    for path in (cell.parent / ".seed-1.claim", cell / ".pgra-lock"):  # as if written on node-17
        path.write_text(json.dumps({**json.loads(path.read_text()), "host": "node-17"}))
        os.utime(path, (old, old))
    rerun = _pgra(["experiment", "--config", str(config)], tmp_path / "rerun.log")
    code = rerun.wait(timeout=600)
    text = (tmp_path / "rerun.log").read_text()
    assert code == 0, text[-3000:]
    taken = f"taking over the lock of process {killed.pid} on host node-17"
    assert text.count(taken) == 2, text[-3000:]  # the claim, then the reader's lock in the cell
    assert "[sky/fid/seed-1] resuming" in text
    assert json.loads((cell / "cell.json").read_text())["cost"]["resumed"]
    assert not (cell / ".pgra-lock").exists() and not (cell.parent / ".seed-1.claim").exists()


# ----- a claim from the future (issue 67 H10) -----
def test_a_cell_whose_claim_was_touched_a_year_ahead_runs_and_says_so(tmp_path, capsys):
    """A forged claim from another host touched a year ahead was never stale: its cell never ran and the run
    exited 0. It is taken over as foreign (one line naming it) and the cell runs."""
    from pgra.experiment import Experiment
    from pgra.experiment.claims import claim_path

    write_sky_task(tmp_path)
    write_corpus(tmp_path)
    exp = Experiment(_grid_config(tmp_path, wait_s=2.0, claim_poll_s=0.1))
    cell = exp.out / "sky" / "knn_vote" / "seed-1"
    cell.parent.mkdir(parents=True)
    ahead = time.time() + 365 * 86400
    claim_path(cell).write_text(json.dumps({"pid": 4242, "host": "node-17", "started": time.time()}))
    os.utime(claim_path(cell), (ahead, ahead))
    assert exp.run() == []
    assert (cell / "cell.json").exists()
    said = [line for line in capsys.readouterr().err.splitlines() if "in the future" in line]
    assert len(said) == 1 and str(claim_path(cell)) in said[0] and "host node-17" in said[0]
