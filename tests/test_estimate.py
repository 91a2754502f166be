# numerics: the planner's Python float arithmetic on hand-made records (no vectorised kernel): pytest.approx's default
"""The plan before the spend: cost estimates from hand-made cost records and bench fits, each with its source,
the longest-processing-time schedule, and the ``--dry-run`` text that shows them."""

import json
import shutil
from pathlib import Path

import pytest

from pgra.cli import main
from pgra.core.config import from_dict
from pgra.experiment import Experiment, ExperimentConfig
from pgra.experiment.estimate import (
    BenchFits,
    Plan,
    estimate_cell,
    estimate_stage,
    format_seconds,
    gpu_measurements,
    lpt_assign,
    lpt_order,
    plan_wallclock,
    worker_threads,
)
from pgra.experiment.layout import CELL_FILE, STAGE_COST_FILE, STAGE_KEY_FILE
from pgra.reader.cost_model import encoder_layers, evaluated_inputs
from pgra.reader.fits import bf16_step_ratios, top_layer_shares, top_layer_store
from pgra.runtime.cost import CPU_CELL_COSTS, CpuCellCosts
from tests.conftest import write_corpus, write_sky_task
from tests.test_experiment import _config

H100 = {"device": "NVIDIA H100 80GB HBM3"}
RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
READER = {"reader": {"max_steps": 100, "n_passages": 4, "batch_size": 16}, "data": "candidates"}


def _priced(stage, fits, inputs, texts=None):
    """``stage``'s own plan priced over ``fits`` (:meth:`pgra.stages.Stage.plan`) for a task of ``inputs`` inputs
    whose LM embeds ``texts`` (a corpus pass over a corpus of that many sentences)."""
    from pgra.methods import get_stage
    from pgra.rerank.config import RerankConfig
    from pgra.stages import PlanRequest

    return get_stage(stage).plan(PlanRequest(None, RerankConfig(corpus_pass="corpus"), 150, inputs, texts,
                                             fits=fits)).priced


def _texts(rerank, retrieved_k, inputs, corpus, stages, corpus_passed=False):
    """What each stage's plan says its LM embeds for one task."""
    from pgra.methods import get_stage
    from pgra.stages import PlanRequest

    request = PlanRequest(None, rerank, retrieved_k, inputs, corpus, stages, corpus_passed)
    return {stage: get_stage(stage).plan(request).texts for stage in stages}


def _cell(task, method, seconds, settings=READER, resumed=False, device=H100):
    return {"task": task, "method": method, "settings": settings,
            "cost": {"elapsed_s": seconds, "resumed": resumed, "hardware": device}}


def test_the_schedule_allocates_nothing_per_worker():
    """A billion workers (a library caller's: the option stops at MAX_WORKERS) are scheduled in the memory of the
    jobs alone: run under a 3 GiB address-space limit, which one list entry per worker would exceed (H3)."""
    import subprocess
    import sys

    resource = pytest.importorskip("resource")
    code = ("from pgra.experiment.estimate import lpt_assign, plan_wallclock\n"
            "print(lpt_assign([5.0, 4.0, 3.0], 10**12), plan_wallclock([5.0, 4.0, 3.0], 10**12))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)))
    assert proc.stdout.split() == ["[0,", "1,", "2]", "5.0"], proc.stderr[-2000:]


def test_lpt_schedule_exact():
    assert lpt_order([1.0, 3.0, 2.0, 3.0]) == [1, 3, 2, 0]  # costliest first, ties in their order
    # LPT, not the optimum: 5,4 | 3,3,3 would take 9; greedy gives 5+3 | 4+3+3 = 10
    assert lpt_assign([5, 4, 3, 3, 3], 2) == [0, 1, 1, 0, 1]
    assert plan_wallclock([5, 4, 3, 3, 3], 2) == 10
    assert plan_wallclock([5, 4, 3, 3, 3], 1) == 18
    assert plan_wallclock([5, 4, 3], 8) == 5
    assert plan_wallclock([], 4) == 0
    assert plan_wallclock([7, 7, 7, 7, 2, 2, 2, 2], 4) == 9
    with pytest.raises(ValueError):
        plan_wallclock([1.0], 0)


def test_cell_estimates_and_their_sources():
    inputs = {"mr": 200, "sst2": 600}
    records = [("mr/fid/seed-1", _cell("mr", "fid", 100.0)), ("mr/fid/seed-2", _cell("mr", "fid", 200.0)),
               ("mr/fid/seed-3", _cell("mr", "fid", 5.0, resumed=True)),  # a resumed run's time is partial
               ("sst2/fid/seed-1", _cell("sst2", "fid", 300.0, device={"device": "cpu"})),
               ("sst2/pgra/seed-1", _cell("sst2", "pgra", 900.0, device={"device": "cpu"}))]
    same = estimate_cell("mr", "fid", READER, records, inputs)
    assert (same.seconds, same.device, same.source) == (150.0, "gpu", "recorded: mr/fid/seed-1, mr/fid/seed-2")
    # another method's cells on the task with the same reader settings come first (PGRA's reader costs FiD's)
    shared = estimate_cell("mr", "pgra", READER, records, inputs)
    assert (shared.seconds, shared.device) == (150.0, "gpu")
    assert shared.source == "recorded: mr/fid/seed-1, mr/fid/seed-2 (another method with the same reader settings)"
    assert estimate_cell("mr", "pgra", {**READER, "reader": {**READER["reader"], "n_passages": 8}}, records,
                         inputs).source == "recorded: sst2/pgra/seed-1, x 200/600 inputs"  # another reader: scaled
    scaled = estimate_cell("cr", "pgra", READER, records, {**inputs, "cr": 300})
    assert (scaled.seconds, scaled.device) == (450.0, "cpu")
    assert scaled.source == "recorded: sst2/pgra/seed-1, x 300/600 inputs"
    # other settings on the same task: not that record; the fit (100 steps x (0.24 + 0.2 x 4) s x 16/8)
    fits = BenchFits("cpu", reader=(0.24, 0.2), reader_batch=8, reader_source="bench fit X")
    other = {"reader": {**READER["reader"], "max_steps": 100}, "data": "reranked"}
    fitted = estimate_cell("cr", "no_retrieval", other, records, {"cr": None}, fits)
    assert fitted.seconds == pytest.approx(208.0) and fitted.source == "bench fit X" and fitted.device == "cpu"
    unknown = estimate_cell("mr", "knn_vote", {"knn_vote": {"k": 3}}, records, inputs, fits)
    assert unknown.seconds is None and unknown.text() == "cost unknown (no record of this method, no bench fit)"
    # each method's own cost model prices it; a method without one whose settings are a reader's (a plug-in built
    # on Method, or a name no method has now) is priced as a reader, as its settings show
    from pgra.methods import METHODS, register_method
    from tests.toys import toy_method

    register_method(toy_method.Majority)
    try:
        for name in ("toy_majority", "no_such_method"):
            assert estimate_cell("cr", name, other, records, {"cr": None}, fits).seconds == pytest.approx(208.0)
    finally:
        METHODS.pop("toy_majority")
    assert same.text() == "~2.5 min gpu (recorded: mr/fid/seed-1, mr/fid/seed-2)"


def test_readers_training_top_layers_cost_the_measured_share_plus_storing(tmp_path):
    rows = [{"d": d, "n": n, "cpu_s_per_step": c, "store_cpu_s_per_input": st} for d, n, c, st in
            [(2, 0, 1.0, 0.4), (2, 1, 2.0, 0.3), (2, 6, 8.0, None), (8, 0, 2.0, 1.0), (8, 6, 4.0, None)]]
    assert top_layer_shares(rows) == {2: [(0, 0.125), (1, 0.25), (6, 1.0)], 8: [(0, 0.5), (6, 1.0)]}
    assert top_layer_store(rows) == {2: [(0, 0.4), (1, 0.3)], 8: [(0, 1.0)]}
    fits = BenchFits("cpu", reader=(0.24, 0.2), reader_batch=8, reader_source="bench fit X",
                     top_layers=top_layer_shares(rows), top_layers_store=top_layer_store(rows), bench_layers=6)
    six, twelve = tmp_path / "bert2bert", tmp_path / "t5"
    for folder, config in ((six, {"encoder": {"num_hidden_layers": 6}}), (twelve, {"num_layers": 12})):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
    assert (encoder_layers(str(six)), encoder_layers(str(twelve)), encoder_layers("t5-base")) == (6, 12, None)
    reader = {"max_steps": 100, "n_passages": 4, "batch_size": 16, "model": str(six), "train_top_layers": 1}
    full = 100 * (0.24 + 0.2 * 4) * 16 / 8  # 208 s: the fit for a reader training every weight
    # d=4: the nearest measured d is 2 (ties go to the smaller); 1 of 6 layers: 0.25 of a step, 0.3 s an input stored
    top = estimate_cell("cr", "fid", {"reader": reader}, [], {"cr": 50}, fits)
    assert top.seconds == pytest.approx(full * 0.25 + 0.3 * 50)
    assert "x 0.25 for 1 of 6 encoder layers trained" in top.source
    # 1 of 12 layers is half a bench layer: between n=0 and n=1
    half = estimate_cell("cr", "fid", {"reader": {**reader, "model": str(twelve)}}, [], {"cr": 50}, fits)
    assert half.seconds == pytest.approx(full * 0.1875 + 0.35 * 50)
    frozen = {**reader, "n_passages": 7, "freeze_encoder": True}
    frozen.pop("train_top_layers")
    assert estimate_cell("cr", "fid", {"reader": frozen}, [], {"cr": 50}, fits).seconds == \
        pytest.approx(100 * 1.64 * 2 * 0.5 + 1.0 * 50)  # d=7: nearest measured d is 8
    # every layer trained: the full step and nothing stored; an unknown layer count (hub name): the fit unscaled
    assert fits.top_layer_share(6, 2, 6) == fits.top_layer_share(12, 8, 12) == 1.0
    assert fits.store_seconds(6, 2, 6) == 0.0 and fits.top_layer_share(None, 2, 6) is None
    hub = estimate_cell("cr", "fid", {"reader": {**reader, "model": "t5-base"}}, [], {"cr": 50}, fits)
    assert hub.seconds == pytest.approx(full) and hub.source == "bench fit X"
    # bf16 autocast on a CPU: the training steps cost the measured share of fp32's (nearest d, linear in n), storing
    # does not change; fp16, a GPU or an unmeasured table leave the fp32 estimate
    precision_rows = rows + [{"d": 2, "n": n, "precision": p, "cpu_s_per_step": 9.0, "ratio_to_fp32": r,
                              "store_cpu_s_per_input": 9.0} for n, p, r in
                             [(0, "bf16", 0.5), (2, "bf16", 0.3)]]
    assert top_layer_shares(precision_rows) == top_layer_shares(rows)  # bf16 rows never enter the fp32 tables
    assert top_layer_store(precision_rows) == top_layer_store(rows)
    fits.bf16_ratios = bf16_step_ratios(precision_rows)
    assert fits.bf16_ratios == {2: [(0, 0.5), (2, 0.3)]}
    bf16 = estimate_cell("cr", "fid", {"reader": {**reader, "mixed_precision": "bf16"}}, [], {"cr": 50}, fits)
    assert bf16.seconds == pytest.approx(full * 0.4 * 0.25 + 0.3 * 50)
    assert bf16.source.endswith("x 0.40 for bf16 autocast (bench reader_top_layers_bf16.json)")
    assert fits.bf16_ratio("bf16", None, 2, None) == 0.3  # every weight trained: the largest measured n
    for other in ({**reader, "mixed_precision": "fp16"}, {**reader, "mixed_precision": "no"}):
        assert estimate_cell("cr", "fid", {"reader": other}, [], {"cr": 50}, fits).seconds == pytest.approx(top.seconds)
    assert BenchFits("gpu", bf16_ratios=fits.bf16_ratios).bf16_ratio("bf16", 1, 2, 6) is None


def test_stage_estimates_and_their_sources():
    records = [("sst2", "candidates", {"elapsed_s": 60.0, "hardware": {"device": "cpu"}}),
               ("sst2", "reranked", {"elapsed_s": 3000.0, "hardware": H100}),
               ("mr", "candidates", {"elapsed_s": 12.0, "hardware": {"device": "cpu"}})]
    inputs = {"mr": 200, "sst2": 600, "cr": 300}
    assert estimate_stage("mr", "reranked", True, records, inputs).source == "done"
    own = estimate_stage("mr", "candidates", False, records, inputs)
    assert (own.seconds, own.source) == (12.0, "recorded: mr/candidates (earlier settings)")
    scaled = estimate_stage("cr", "reranked", False, records, inputs)
    assert (scaled.seconds, scaled.device, scaled.source) == (1500.0, "gpu", "recorded: sst2/reranked, x 300/600 inputs")
    fits = BenchFits("cpu", rerank=(4.0, 0.05), rerank_source="bench fit R")
    fitted = estimate_stage("cr", "reranked", False, [], inputs, fits, _priced("reranked", fits, 300, 1000))
    assert fitted.seconds == pytest.approx(54.0) and fitted.source == "bench fit R, 1000 candidates"
    assert estimate_stage("cr", "candidates", False, [], inputs, fits, _priced("candidates", fits, 300)).seconds is None


def test_a_cell_trained_under_ddp_is_priced_as_one_workers_work():
    """A reader's cell records its training loop's seconds (``split_s``) and the processes that split them
    (``parallel: ddp``): the plan prices the loop x their number and the rest (loads, the main process's final
    predictions) once, x the thread factor at the cores each had (``cores_each``, which holds half a core where 4
    ranks of one thread shared 2 cores); so does the cost table. Under ``parallel: ddp`` the plan's cells run one
    after another, the split seconds divided among the workers, the rest whole."""
    from pgra.runtime.cost import device_seconds

    cpu = {"device": "cpu", "torch_threads": 1, "cores_each": 0.5}
    ddp = {**_cell("mr", "fid", 100.0, device=cpu), "key": "k"}
    ddp["cost"].update(split_s=80.0, processes=4, devices=1)
    fits = BenchFits("cpu", cpu_threads=1.0)
    own = estimate_cell("mr", "fid", READER, [("mr/fid/seed-1", ddp)], {"mr": 100}, fits)
    assert (own.seconds, own.split_s) == (340.0, 320.0)
    assert own.source == "recorded: mr/fid/seed-1, its training loop x 4 process(es) that split it"
    alone = {**_cell("mr", "fid", 100.0, device={"device": "cpu", "torch_threads": 1}), "key": "j"}
    alone["cost"]["split_s"] = 90.0  # one process: what DDP ranks would split
    mean = estimate_cell("mr", "fid", READER, [("a", ddp), ("b", alone)], {"mr": 100}, fits)
    assert (mean.seconds, mean.split_s) == (220.0, 205.0)
    assert mean.source == "recorded: a, b, x 2.2 for the processes and cores each ran on"
    scaled = estimate_cell("cr", "fid", READER, [("mr/fid/seed-1", ddp)], {"mr": 100, "cr": 50}, fits)
    assert (scaled.seconds, scaled.split_s) == (170.0, 160.0)
    assert "x 50/100 inputs, its training loop x 4 process(es) that split it" in scaled.source
    fits.cpu_threads = 0.25  # 8 workers on 2 cores: a quarter core each, half what each rank had
    assert estimate_cell("mr", "fid", READER, [("a", ddp)], {"mr": 100}, fits).seconds == 680.0
    assert (device_seconds(ddp["cost"]), device_seconds(alone["cost"])) == (340.0, 100.0)
    for split in (120.0, -1.0, "80", float("nan")):  # edited by hand: the whole wall-clock was split
        assert device_seconds({**ddp["cost"], "split_s": split}) == 400.0
    # a kNN vote (nothing split) and a record from before split_s: nothing divided under ddp
    vote = estimate_cell("mr", "knn_vote", {"k": 3}, [("v", {**_cell("mr", "knn_vote", 30.0, settings={"k": 3},
                                                                      device=cpu), "key": "v"})], {"mr": 100}, fits)
    assert (vote.seconds, vote.split_s) == (60.0, 0.0)
    # the wall-clock of a ddp grid on the 4 workers that recorded the reader: its 100 s again, plus the vote's
    cells = [own, vote]
    assert Plan(stages=[], cells=cells, workers=4, ddp=True).wallclock() == (0.0, 20.0 + 320.0 / 4 + 60.0)
    assert Plan(stages=[], cells=cells, workers=4).wallclock() == (0.0, 340.0)  # side by side: the longest
    # 4 ranks on 2 GPUs: the split seconds over 2 devices
    assert Plan(stages=[], cells=cells, workers=4, cells_per_gpu=2, ddp=True).wallclock()[1] == 20.0 + 160.0 + 60.0


def test_a_stage_recorded_under_several_processes_is_priced_as_one_workers_work():
    """A stage's cost.json holds its wall-clock under the processes that built it together; the plan divides a
    stage by its workers, so the record is first made one worker's: x its processes, x the thread factor."""
    cpu = {"device": "cpu", "torch_threads": 1}
    records = [("mr", "reranked", {"elapsed_s": 600.0, "processes": 2, "hardware": cpu}),
               ("mr", "candidates", {"elapsed_s": 30.0, "hardware": cpu})]  # from before pgra wrote processes
    inputs = {"mr": 100, "cr": 50}
    fits = BenchFits("cpu", cpu_threads=1.0)  # 2 workers on 2 cores: one core each, as recorded
    own = estimate_stage("mr", "reranked", False, records, inputs, fits)
    assert own.seconds == 1200.0 and own.source == "recorded: mr/reranked (earlier settings), x 2 process(es) that built it"
    assert estimate_stage("mr", "candidates", False, records, inputs, fits).seconds == 30.0
    plan = Plan(stages=[own], cells=[], workers=2)
    assert plan.wallclock() == (600.0, 0.0)  # the same 2 workers take what the record took (300 s before)
    fits.cpu_threads = 0.5  # 4 workers on 2 cores: each computes on half a core
    halved = estimate_stage("cr", "reranked", False, records, inputs, fits)
    assert halved.seconds == pytest.approx(600.0 * 2 * 2 * 50 / 100)
    assert halved.source == ("recorded: mr/reranked, x 50/100 inputs, x 2 process(es) that built it, "
                             "x 2 for 0.5 core(s) a worker")
    gpu = estimate_stage("mr", "reranked", False, [("mr", "reranked", {"elapsed_s": 60.0, "processes": 8,
                                                                       "hardware": H100})], inputs, fits)
    assert (gpu.seconds, gpu.device) == (480.0, "gpu")  # 8 GPUs' minute: 8 minutes on one
    assert Plan(stages=[gpu], cells=[], workers=8).wallclock()[0] == 60.0
    # 8 ranks on 4 GPUs (cells_per_gpu 2): the stage's work was 4 GPUs' minute, spread again over the 4
    shared = estimate_stage("mr", "reranked", False, [("mr", "reranked", {"elapsed_s": 60.0, "processes": 8,
                                                                          "devices": 4, "hardware": H100})],
                            inputs, fits)
    assert shared.seconds == 240.0 and shared.source.endswith("x 4 GPU(s) that built it")
    assert Plan(stages=[shared], cells=[], workers=8, cells_per_gpu=2).wallclock()[0] == 60.0
    # 4 ranks of 1 thread on 2 cores recorded half a core each: planned on the same 4 workers, their time
    crowded = {"elapsed_s": 600.0, "processes": 4, "hardware": {**cpu, "cores_each": 0.5}}
    fits.cpu_threads = 0.5
    four = estimate_stage("mr", "reranked", False, [("mr", "reranked", crowded)], inputs, fits)
    assert Plan(stages=[four], cells=[], workers=4).wallclock()[0] == 600.0


def test_stage_plans_count_each_corpus_sentence_once_per_task():
    from pgra.rerank.config import RerankConfig

    stages = ["candidates", "reranked", "full_search"]
    per_candidate = RerankConfig(k=150)
    # inputs x k, at most the corpus (the cache embeds a sentence once); full_search embeds the corpus
    assert _texts(per_candidate, 150, 100, 29_790, stages) == \
        {"candidates": None, "reranked": 15_000, "full_search": 29_790}
    assert _texts(per_candidate, 150, 3_200, 29_790, stages)["reranked"] == 29_790
    assert _texts(RerankConfig(k=0), 32, 10, None, stages[:2])["reranked"] == 320  # k=0: the retrieved k
    # a prompt per query caches nothing across queries: no cap
    assert _texts(RerankConfig(k=150, demo_selection="kate"), 150, 3_200, 29_790, stages)["reranked"] == \
        480_000
    # corpus_pass: candidates embeds every retrieved candidate, whatever k reads
    assert _texts(RerankConfig(k=4, corpus_pass="candidates"), 150, 10, 29_790, stages)["reranked"] == 1_500
    # the corpus pass embeds the corpus in the reranked stage; full_search then embeds its queries only
    passed = RerankConfig(k=4, corpus_pass="corpus")
    assert _texts(passed, 150, 3_200, 29_790, stages, corpus_passed=True) == \
        {"candidates": None, "reranked": 29_790, "full_search": 3_200}
    assert _texts(passed, 150, 3_200, 29_790, ["candidates", "full_search"], True)["full_search"] == 29_790
    # a reranked stage that ran without the pass (the option is cosmetic: it stays done): full_search embeds it all
    assert _texts(passed, 150, 3_200, 29_790, stages, corpus_passed=False)["full_search"] == 29_790
    # no index yet: the corpus size, and so both stages' cost, is unknown
    assert _texts(passed, 150, 3_200, None, stages) == {"candidates": None, "reranked": None,
                                                                  "full_search": None}


def test_bench_fits_read_the_results(monkeypatch):
    results = Path(__file__).resolve().parents[1] / "bench" / "results"
    cpu = BenchFits.load(results, "cpu")
    rows = json.loads((results / "reader_scale.json").read_text())
    a, b = cpu.reader
    assert a + b * 16 == pytest.approx(rows[-1]["s_per_step"], rel=0.05) and b == pytest.approx(0.20, abs=0.01)
    assert "reader_scale.json" in cpu.reader_source and "2-core CPU" in cpu.reader_source
    assert cpu.rerank[1] == pytest.approx(0.057, abs=0.002) and "SmolLM2-135M" in cpu.rerank_source
    assert cpu.top_layer_share(1, 4, 6) == pytest.approx(0.41 / 1.64, rel=0.02)  # bench/README's table, d=4
    assert cpu.store_seconds(1, 4, 6) == pytest.approx(0.070, abs=0.001) and cpu.bench_layers == 6
    # bf16 autocast steps: measured beside fp32 (d=4, n=1: 0.41x); read only on a CPU with bf16 hardware
    bf16_rows = json.loads((results / "reader_top_layers_bf16.json").read_text())
    at = {(r["d"], r["n"], r["precision"]): r["cpu_s_per_step"] for r in bf16_rows}
    monkeypatch.setattr("pgra.runtime.device.cpu_has_native_bf16", lambda: True)
    native = BenchFits.load(results, "cpu")
    assert native.bf16_ratio("bf16", 1, 4, 6) == pytest.approx(at[4, 1, "bf16"] / at[4, 1, "fp32"])
    assert native.bf16_ratio("bf16", 1, 4, 6) == pytest.approx(0.41, abs=0.01) and native.bf16_layers == 6
    monkeypatch.setattr("pgra.runtime.device.cpu_has_native_bf16", lambda: False)
    assert BenchFits.load(results, "cpu").bf16_ratio("bf16", 1, 4, 6) is None
    gpu = BenchFits.load(results, "gpu")
    names = json.loads((results / "gpu_plan_inputs.json").read_text())  # which H100 runs the GPU plans read
    loop = next(r for r in json.loads((results / names["reader"]["file"]).read_text())["loops"]
                if r["variant"] == "fused+compile")  # a step of pgra's own training loop, not the bare model step
    lm = json.loads((results / names["rerank"]["file"]).read_text())["rerank"][-1]
    assert gpu.reader_seconds(5000, 16, 8) == pytest.approx(5000 * loop["s_per_step"])
    assert gpu.rerank_seconds(463) == pytest.approx(463 / lm["texts_per_s"]) and lm["model"] == "opt-13b"
    assert "opt-13b" in gpu.rerank_source and "H100" in gpu.reader_source and "training loop" in gpu.reader_source
    assert gpu_measurements(results)["encoding"]["sentences_per_s"] > 40_000  # steady state, batches of 2,048
    assert BenchFits.load(results / "none", "gpu").reader is None and gpu_measurements(results / "none") is None
    assert BenchFits.load(results / "none", "cpu").reader is None


@pytest.fixture()
def planned(tmp_path) -> dict:
    """A fid grid over 2 seeds whose seed-1 cell is done (a hand-made record of 100 s on an H100) and whose
    candidates stage has a cost record of an earlier build (30 s on CPU)."""
    cfg = _config(tmp_path, write_corpus(tmp_path), write_sky_task(tmp_path), "lm", "reader", methods=["fid"])
    exp = Experiment(from_dict(ExperimentConfig, cfg))
    cell = next(c for c in exp.plan() if c.seed == 1)
    cell.directory.mkdir(parents=True)
    record = {**_cell("sky", "fid", 100.0, settings=exp.method(cell.task, "fid").settings()), "key": cell.key}
    (cell.directory / CELL_FILE).write_text(json.dumps(record))
    stage = exp.stage_dir(cell.task, "candidates")
    stage.mkdir(parents=True)
    (stage / STAGE_COST_FILE).write_text(json.dumps({"stage_key": "old", "elapsed_s": 30.0,
                                                     "hardware": {"device": "cpu"}, "work": []}))
    (stage / STAGE_KEY_FILE).write_text("old")
    return cfg


def test_dry_run_shows_costs_their_sources_and_the_wallclock(planned, tmp_path, capsys):
    exp = Experiment(from_dict(ExperimentConfig, planned))
    text = exp.describe(workers=2)
    lines = text.splitlines()
    assert "    candidates               ~30 s cpu (recorded: sky/candidates (earlier settings))" in lines
    seed2 = lines.index(next(x for x in lines if "seed 2" in x))
    assert lines[seed2 - 1] == "      done: nothing to spend"
    assert lines[seed2 + 1] == "      ~100 s gpu (recorded: sky/fid/seed-1)"
    cost = lines.index("expected cost: 2.2 min of work (0.03 GPU h, 0.01 CPU h)")
    own = CpuCellCosts.load(RESULTS / CPU_CELL_COSTS).parts["command"][0]  # imports, checks, the report
    assert lines[cost + 1] == ("wall-clock on 2 worker(s): stages 15 s (each sharded over the workers) + cells 100 s "
                               f"(side by side, costliest first) + the command's own {format_seconds(own)} = "
                               f"{format_seconds(115 + own)}")
    assert lines[cost + 2].startswith("disk, estimated")  # then the disk: the reader "reader" is no model here
    assert any(x.startswith("  not counted: ") and "sky/fid/seed-2 (reader: parameters unknown" in x for x in lines)
    # the command: one process, one worker
    import yaml

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(planned))
    assert main(["experiment", "--config", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "~100 s gpu (recorded: sky/fid/seed-1)" in out
    assert "wall-clock on 1 worker(s): stages 30 s (each sharded over the workers) + cells 100 s" in out


def test_a_plan_is_priced_from_the_records_of_folders_run_elsewhere(planned, tmp_path, capsys):
    """--plan-records DIR: the cost records of another experiment folder or a results bundle (the next piece of a
    grid run in pieces, priced from the pieces before it) price the plan as the experiment's own would."""
    import yaml

    from tests.conftest import one_error_line

    elsewhere = {**planned, "out": str(tmp_path / "next-piece")}
    path = tmp_path / "next.yaml"
    path.write_text(yaml.safe_dump(elsewhere))
    assert main(["experiment", "--config", str(path), "--dry-run"]) == 0
    alone = capsys.readouterr().out
    assert "recorded:" not in alone
    assert main(["experiment", "--config", str(path), "--dry-run", "--plan-records", planned["out"]]) == 0
    out = capsys.readouterr().out
    assert out.count("~100 s gpu (recorded: sky/fid/seed-1)") == 2  # both seeds to run, the other folder's record
    assert "~30 s cpu (recorded: sky/candidates (earlier settings))" in out
    assert not (tmp_path / "next-piece").exists()  # a dry run writes nothing
    # how the plan was priced is no setting of a cell: not in cell.json's config, so pieces still merge
    from pgra.experiment.cell import recorded_config
    from pgra.experiment.config import cell_settings

    with_records = from_dict(ExperimentConfig, {**elsewhere, "plan_records": [planned["out"]]})
    assert "plan_records" not in recorded_config(cell_settings(with_records, with_records.tasks[0]))
    assert Experiment(with_records).shared_settings() == Experiment(from_dict(ExperimentConfig, elsewhere)).shared_settings()
    # records edited by hand price nothing (no traceback): seconds that are no number, a count that is infinite
    junk = tmp_path / "junk"
    (junk / "sky" / "candidates").mkdir(parents=True)
    (junk / "sky" / "candidates" / STAGE_COST_FILE).write_text(json.dumps({"elapsed_s": "soon", "processes": 2}))
    (junk / "sky" / "candidates" / STAGE_KEY_FILE).write_text("old")
    cell = junk / "sky" / "fid" / "seed-1"
    cell.mkdir(parents=True)
    (cell / CELL_FILE).write_text(json.dumps({**_cell("sky", "fid", 1.0), "cost": {"elapsed_s": float("nan")}}))
    assert main(["experiment", "--config", str(path), "--dry-run", "--plan-records", str(junk)]) == 0
    assert "recorded:" not in capsys.readouterr().out
    # a results bundle is checked against its manifest first: an edited cell record is refused by name
    bundle = tmp_path / "mr-seed1"
    shutil.copytree(Path(__file__).resolve().parents[1] / "docs" / "results" / "laptop" / "mr-seed1", bundle)
    edited = bundle / "mr" / "fid" / "seed-1" / CELL_FILE
    edited.write_text(edited.read_text().replace('"elapsed_s": ', '"elapsed_s": 1', 1))
    line = one_error_line(["experiment", "--config", str(path), "--dry-run", "--plan-records", str(bundle)], capsys)
    assert "mr/fid/seed-1/cell.json" in line and "truncated or replaced" in line
    for dry in (["--dry-run"], []):  # refused before anything runs, also on a real run
        line = one_error_line(["experiment", "--config", str(path), *dry, "--plan-records", str(tmp_path / "none")],
                              capsys)
        assert "plan_records" in line and "none is not a folder" in line
    assert not (tmp_path / "next-piece").exists()


def test_dry_run_says_what_the_grid_can_resolve(planned, tmp_path, capsys, monkeypatch):
    """The dry run's Resolution section: per task, at its test inputs (counted in its data files, or in its built
    candidates folder) and the grid's seeds, the planned MDE and what +0.6 points needs, as resolution.py computes
    them under the stated assumptions; a task whose test inputs cannot be counted is skipped with its reason."""
    import yaml

    from pgra.cli.experiment import dry_run_resolution
    from pgra.evaluation.resolution import (
        PAPER_GAIN,
        inputs_needed,
        minimum_detectable_effect,
        planned_se,
        seeds_needed,
    )

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(planned))
    assert main(["experiment", "--config", str(path), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, x in enumerate(lines) if x.startswith("Resolution (planned"))
    assert "alpha 0.05, power 0.8" in lines[header] and "10% of the test inputs" in lines[header]
    assert "0.5 points std over seeds" in lines[header]
    n = len((tmp_path / "skydata" / "test.jsonl").read_text().splitlines())  # the sky task's test file, 2 seeds
    mde = minimum_detectable_effect(planned_se(n, 2, 0.10, 0.005))
    assert inputs_needed(PAPER_GAIN, 2) is None and seeds_needed(PAPER_GAIN, n) is None
    assert lines[header + 1] == (f"  sky: {n} test inputs x 2 seed(s): minimum detectable effect {100 * mde:.2f} "
                                 "points; to detect +0.6 points: no number of test inputs at 2 seed(s), or no "
                                 f"number of seeds at {n} inputs")
    # a built candidates folder is what the cells will be tested on
    cfg = from_dict(ExperimentConfig, planned)
    (Experiment(cfg).stage_dir(cfg.tasks[0], "candidates") / "test.jsonl").write_text("{}\n" * 1000)
    line = dry_run_resolution(Experiment(cfg))[1]
    assert line.startswith("  sky: 1,000 test inputs x 2 seed(s): minimum detectable effect "
                           f"{100 * minimum_detectable_effect(planned_se(1000, 2, 0.10, 0.005)):.2f} points")
    assert line.endswith("to detect +0.6 points: no number of test inputs at 2 seed(s), or no number of seeds at "
                         "1,000 inputs")
    # no test split, or unknown before the data is built (no local files): skipped, with the reason
    monkeypatch.setattr("pgra.experiment.estimate.inputs.task_splits", lambda *a, **k: {"train": 10, "dev": 2})
    assert dry_run_resolution(Experiment(cfg))[1] == "  sky: no 'test' inputs among its splits (dev, train): skipped"
    monkeypatch.setattr("pgra.experiment.estimate.inputs.task_splits", lambda *a, **k: None)
    assert dry_run_resolution(Experiment(cfg)) == [
        "Resolution:", "  sky: its test inputs are unknown until its data is built (no local split files to "
                       "count): skipped"]


def test_corpus_passed_reads_a_done_stage_from_its_manifest(planned, monkeypatch):
    from pgra.experiment.estimate.inputs import corpus_passed_by as _corpus_passed

    exp = Experiment(from_dict(ExperimentConfig, {**planned, "rerank": {**planned["rerank"],
                                                                       "corpus_pass": "corpus"}}))
    task = exp.cfg.tasks[0]
    assert _corpus_passed(exp, task, 100) and not _corpus_passed(exp, task, None)  # to run: unknown corpus, no pass
    monkeypatch.setattr(Experiment, "stage_done", lambda self, t, stage: True)
    manifest = exp.stage_dir(task, "reranked") / "manifest.json"
    manifest.parent.mkdir(parents=True)
    for text, passed in (('{"corpus_pass": {"mode": "corpus"}}', True), ('{"corpus_pass": {"mode": "candidates"}}',
                         False), ("{}", False), ('{"corpus_pass": "corpus"}', False), ("[1]", False), ("{", False)):
        manifest.write_text(text)  # what pgra wrote, then hand edits: the plan never fails on them
        assert _corpus_passed(exp, task, 100) is passed, text


def test_the_dry_run_plans_the_disk_and_a_tiny_cell_holds_what_it_planned(tmp_path, corpus_txt, sky_task, tiny_opt,
                                                                          tiny_t5, capsys):
    """The plan's disk: the index (a BM25 index is not estimated before it is built), the stages' JSONL files, a
    reader cell's best/ from its model's parameters x 4 B (within 2x of the folder a tiny cell leaves), its
    predictions, and the peak a running cell's checkpoints add (weights and AdamW's 2 moments). Run, the done parts
    are counted at their size on disk: the cell without its checkpoints, the index built."""
    import yaml

    from pgra.experiment.estimate import format_bytes, plan_costs
    from pgra.reader.cost_model import reader_disk
    from pgra.runtime.sizes import folder_bytes

    cfg = _config(tmp_path, corpus_txt, sky_task, tiny_opt, tiny_t5, methods=["fid", "knn_vote"], seeds=[1],
                  report=False)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["experiment", "--config", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    exp = Experiment(from_dict(ExperimentConfig, cfg))
    disk = plan_costs(exp, workers=1).disk
    planned = reader_disk(exp.method(exp.cfg.tasks[0], "fid").inputs.settings.reader)
    assert planned.trained == planned.parameters  # every weight trains
    assert planned.checkpoint_bytes == pytest.approx(3 * 4 * planned.parameters)
    lines = out.splitlines()
    head = lines.index("disk, estimated (what the grid holds once every cell is done; what is already there at its "
                       "size):")
    assert lines[head + 1].startswith(f"  index {tmp_path / 'index'} (shared): to build, size not estimated")
    assert lines[head + 2].startswith("  stages: ") and "candidates" in lines[head + 2]
    reader_line = next(x for x in lines if x.startswith("  reader cells: 1 x "))
    assert f"best/ {format_bytes(planned.best_bytes)} = " in reader_line and "x 4 B (fp32" in reader_line
    assert "resumable checkpoints deleted once the cell is done" in reader_line
    assert any(x.startswith("  other cells: 1 x ") for x in lines)
    assert f"peak while training: + {format_bytes(2 * planned.checkpoint_bytes)} (1 reader cell(s) at once" in out
    assert disk.peak == pytest.approx(2 * planned.checkpoint_bytes) and disk.unknown == ["the index"]
    assert disk.total == pytest.approx(sum(disk.stages.values()) + sum(sum(v) for v in disk.cells.values()))

    assert exp.run() == []
    run = tmp_path / "exp" / "sky" / "fid" / "seed-1"
    best = folder_bytes(run / "best")
    assert best / 2 <= planned.best_bytes <= 2 * best, (planned.best_bytes, best)
    assert not (run / "checkpoints").exists()
    for stage in ("candidates", "reranked"):  # within 2x too, with a measured line size
        if stage in disk.stages:
            actual = folder_bytes(tmp_path / "exp" / "sky" / stage)
            assert actual / 2 <= disk.stages[stage] <= 2 * actual, (stage, disk.stages[stage], actual)
    done = plan_costs(Experiment(from_dict(ExperimentConfig, cfg)), workers=1).disk
    assert done.index == folder_bytes(tmp_path / "index") and done.peak == 0 and done.unknown == []
    assert done.cells["reader cells"] == [folder_bytes(run)]


def test_reuse_or_run_records_cost_and_key_then_reuses(tmp_path):
    from pgra.experiment.reuse import reuse_or_run
    from pgra.runtime.distributed import DistContext
    from pgra.storage.artifacts import MANIFEST

    folder, calls = tmp_path / "stage", []

    def build():
        calls.append(1)
        folder.mkdir(exist_ok=True)
        (folder / MANIFEST).write_text("{}")

    assert reuse_or_run(folder, ".k", "key-1", build, DistContext()) is False
    cost = json.loads((folder / STAGE_COST_FILE).read_text())
    assert cost["stage_key"] == "key-1" and {"elapsed_s", "hardware", "work"} <= set(cost)
    assert cost["processes"] == 1
    assert (folder / ".k").read_text().strip() == "key-1"
    assert reuse_or_run(folder, ".k", "key-1", build, DistContext()) is True and calls == [1]
    assert reuse_or_run(folder, ".k", "key-2", build, DistContext()) is False and calls == [1, 1]
    (folder / MANIFEST).unlink()  # an unfinished build is never reused
    assert reuse_or_run(folder, ".k", "key-2", build, DistContext()) is False and len(calls) == 3


def _table2_module():
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("plan_table2", root / "bench" / "plan_table2.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_table2_plan_is_the_bench_readmes():
    """bench/plan_table2.py: its parts add up, the cells are the LPT schedule of 72 reader cells, the config's index
    batch and reranker budget are the measured ones, and the numbers bench/README.md quotes (one and two cells per
    GPU; the other pages link it) are what it computes."""
    root = Path(__file__).resolve().parents[1]
    module = _table2_module()
    readme = (root / "bench" / "README.md").read_text()
    for per_gpu in (1, 2):
        p = module.plan(8, cells_per_gpu=per_gpu)
        assert p["cells"] == 72 and p["total_s"] == pytest.approx(p["index_s"] + p["candidates_s"] + p["rerank_s"] +
                                                                 p["cells_s"])
        assert p["cells_lower_bound_s"] <= p["cells_s"] <= p["cells_lower_bound_s"] + p["longest_cell_s"]
        assert p["differs"] == []  # the config runs the index batch and the reranker budget the plan's rates had
        quoted = [f"{p['total_s'] / 3600:.2f} h", f"{p['cells_s'] / 60:.1f} min", f"{p['gpus_for_one_hour']} GPUs"]
        for text in quoted + [f"{p['rerank_s'] / 60:.1f} min", f"{p['written_tb']:.2f} TB"]:
            assert text in readme, text


def test_table2_disk_knows_wiki1m_has_a_million_sentences():
    """bench/plan_table2.py's disk plan (docs/beyond-one-machine.md, *Disk of the Table 2 grid*) passes Wiki1M's 1M
    sentences to plan_disk: each task's cache rows are its distinct candidates, at most the corpus, and its inputs,
    and the flat index is sized from bert-base-uncased's known 768 dims though neither is on this machine."""
    module = _table2_module()
    disk = module.plan(8)["disk"]
    inputs = [sum(split.values()) for split in module.table2_splits().values()]
    assert disk["cache_rows"] == sum(min(n * 150, 1_000_000) + n for n in inputs)
    assert disk["index"] == 1_000_000 * 768 * 4 + 1_000_000 * 150  # the vectors and the corpus copy at 150 B
    assert disk["total"] == pytest.approx(disk["index"] + disk["stages"] + disk["cache"] + disk["cells"])
    assert disk["analyses_cache"] == disk["cache_rows"] * (512 + 2048 + 2560 + 4096) * 4


def _gpu_cell_by_hand(results: Path, reader: dict, split: dict) -> float:
    """A GPU reader cell from the measurement files themselves (gpu_plan_cells.json names them)."""
    names = json.loads((results / "gpu_plan_cells.json").read_text())
    runs = {}
    for where in [*names["steps"].values(), names["loop"], names["overheads"]]:
        runs[where["file"]] = json.loads((results / where["file"]).read_text())

    def bare(variant):
        where = names["steps"][variant]
        row = next(r for r in runs[where["file"]]["readers"] if r["variant"] == variant)
        warm = next(r for r in runs[where["file"]]["readers"] if r["variant"] == where.get("warmup_variant", variant))
        return row["s_per_step"], warm["warmup_s"] - runs[where["file"]]["args"]["warmup_steps"] * warm["s_per_step"]

    variant = "+".join((["fused"] if reader.get("adamw_impl") == "fused" else []) +
                       (["compile"] if reader.get("compile") else []) +
                       (["cudagraphs"] if reader.get("compile_mode") == "reduce-overhead" else [])) or "eager"
    step, warmup = bare(variant)
    loop = next(r for r in runs[names["loop"]["file"]]["loops"] if r["variant"] == names["loop"]["variant"])
    o = runs[names["overheads"]["file"]]
    d = max(reader["n_passages"], 1)
    steps = reader["max_steps"] * (loop["loop_overhead_s"] + step * d / 16 * reader["batch_size"] / 8)
    evals = reader["max_steps"] // reader["eval_every"]
    per_input = bare("eager")[0] / 8 / 3 * d / 16  # a forward: 2 of a trained token's 6 FLOPs per parameter
    evaluations = (evals * split["dev"] + split["dev"] + split["test"]) * per_input
    saves = reader["max_steps"] // reader["eval_every"]  # save_every 0: at every evaluation
    return (steps + warmup + evaluations + saves * o["checkpoint_median_s"] + evals * o["best_median_s"]
            + 2 * o["load_median_s"] + o["process_start_median_s"])


def test_the_table2_plan_is_a_hand_computation_from_its_fits_and_the_configs_options():
    """Each Table 2 cell, priced as the config runs it: the measured step of the config's variant (compiled, CUDA
    graphs, fused AdamW), scaled by d and the batch, plus the loop's fixed cost a step (the intercept), the
    compilation, the evaluations, the checkpoints and best/ saves, two loads and the process start. Eager settings
    price the eager step: the plan reads the options, it does not assume them."""
    results = Path(__file__).resolve().parents[1] / "bench" / "results"
    module = _table2_module()
    exp = module.load_table2()
    fits = BenchFits.load(results, "gpu")
    splits = module.table2_splits()
    for task, method in (("mr", "pgra"), ("trec", "fid"), ("sst2", "no_retrieval")):
        reader = exp.method(task, method).settings()["reader"]
        assert (reader["compile"], reader["compile_mode"], reader["adamw_impl"], reader["pad_to_multiple"]) == \
            (True, "reduce-overhead", "fused", 32)
        priced = estimate_cell(task, method, {"reader": reader}, [], {}, fits, {task: splits[task]})
        assert priced.seconds == pytest.approx(_gpu_cell_by_hand(results, reader, splits[task]))
        assert priced.device == "gpu" and "fused+compile+cudagraphs" in priced.source
        eager = {k: v for k, v in reader.items() if k not in ("compile", "compile_mode", "adamw_impl")}
        slower = estimate_cell(task, method, {"reader": eager}, [], {}, fits, {task: splits[task]})
        assert slower.seconds == pytest.approx(_gpu_cell_by_hand(results, eager, splits[task]))
        assert "eager 0.158 s" in slower.source and ("host-bound" in slower.source) == (method == "no_retrieval")
        split = splits[task]
        assert fits.gpu_cell(eager, split).parts["steps"] > fits.gpu_cell(reader, split).parts["steps"]
        if method != "no_retrieval":  # at d=0 eager's steps save less than the compilation costs
            assert slower.seconds > priced.seconds
    # the intercept: a no-retrieval cell is no longer 1/16 of a d=16 cell (the old fit's 41 s)
    reader = exp.method("sst2", "no_retrieval").settings()["reader"]
    alone = fits.gpu_cell(reader, splits["sst2"])
    assert alone.parts["steps"] > 5000 * fits.loop_s > 0 and alone.seconds > 5 * 60
    p = module.plan(8)
    assert p["estimates"][0].seconds == pytest.approx(estimate_cell(
        "sst2", "no_retrieval", {"reader": reader}, [], {}, fits, {"sst2": splits["sst2"]}).seconds)


def test_gpu_cells_count_their_overheads():
    """The parts of a GPU cell: steps, warm-up, evaluations, checkpoints (every eval_every steps: 10 of 5,000),
    best/ (at most one per evaluation), two model loads, the process start; the bytes written and kept."""
    results = Path(__file__).resolve().parents[1] / "bench" / "results"
    fits = BenchFits.load(results, "gpu")
    o = fits.overheads
    assert o.checkpoint_bytes == pytest.approx(12 * 222_903_552, rel=0.01)  # fp32 weights and AdamW's two moments
    reader = {"max_steps": 5000, "n_passages": 16, "batch_size": 8, "eval_every": 500, "mixed_precision": "bf16",
              "compile": True, "compile_mode": "reduce-overhead", "adamw_impl": "fused", "pad_to_multiple": 32}
    cost = fits.gpu_cell(reader, {"train": 900, "dev": 100, "test": 200})
    assert set(cost.parts) == {"steps", "warm-up", "evaluations", "checkpoints", "best/", "loads", "start"}
    assert all(v > 0 for v in cost.parts.values()) and cost.seconds == pytest.approx(sum(cost.parts.values()))
    assert cost.parts["checkpoints"] == pytest.approx(10 * o.checkpoint_s)
    assert cost.parts["best/"] == pytest.approx(10 * o.best_s) and cost.parts["loads"] == pytest.approx(2 * o.load_s)
    assert cost.parts["start"] == o.process_start_s
    assert cost.written_bytes == pytest.approx(10 * o.checkpoint_bytes + 10 * o.best_bytes)
    assert cost.kept_bytes == pytest.approx(o.best_bytes)  # a done cell's checkpoints are deleted
    assert fits.gpu_cell({**reader, "keep_resume_state": True}, None).kept_bytes == \
        pytest.approx(o.checkpoint_bytes + o.best_bytes)
    # the device's share: the model steps and the evaluations; the rest is the host's
    assert cost.device_s == pytest.approx(cost.parts["steps"] - 5000 * fits.loop_s + cost.parts["evaluations"])
    # save_every 2,500 writes 2 checkpoints; no evaluation: best/ once, at the end; unknown splits: said
    fewer = fits.gpu_cell({**reader, "save_every": 2500, "eval_every": 0}, None)
    assert fewer.parts["checkpoints"] == pytest.approx(2 * o.checkpoint_s)
    assert fewer.parts["best/"] == pytest.approx(o.best_s) and "evaluations" not in fewer.parts
    assert "evaluations not priced: the split sizes are unknown" in fewer.source
    # an unmeasured variant stands in for the nearest measured one, and says so
    assert fits.gpu_variant_step("compile+cudagraphs")[0].variant == "fused+compile+cudagraphs"
    assert "compile+cudagraphs not measured" in fits.gpu_variant_step("compile+cudagraphs")[1]
    assert fits.gpu_variant_step("fused")[1] == "" and fits.gpu_variant_step("eager")[0].s_per_step == \
        pytest.approx(0.1576, abs=1e-4)


def test_cells_sharing_a_gpu_by_hand():
    """cells_per_gpu: 2 workers on one GPU, each cell at the longer of its time and 2 x its device time; the
    stages sharded over the one GPU."""
    from pgra.experiment.estimate import Estimate, Plan

    cells = [Estimate.at("a", 100.0, "x", "gpu", device_s=30.0), Estimate.at("b", 100.0, "x", "gpu", device_s=80.0),
             Estimate.at("c", 50.0, "x", "gpu"), Estimate.at("d", 0.0, "done")]
    stage = [Estimate.at("s", 60.0, "x", "gpu")]
    one, two = Plan(stage, cells, 1), Plan(stage, cells, 2, cells_per_gpu=2)
    assert one.wallclock() == (60.0, 250.0) and two.gpus == 1 and two.wallclock()[0] == 60.0
    assert [two.shared_seconds(e) for e in cells] == [100.0, 160.0, 100.0, 0.0]  # unknown device time: no gain
    assert two.wallclock()[1] == plan_wallclock([100.0, 160.0, 100.0, 0.0], 2) == 200.0
    assert "2 cells per GPU (assumed, not measured" in "\n".join(two.summary())
    assert "side by side, 2 per GPU on 1" in two.summary()[-1] and "each sharded over the GPUs, one rank a GPU" in two.summary()[-1]


def _gpu_asking_config(tmp_path, **reader) -> dict:
    cfg = _config(tmp_path, write_corpus(tmp_path), write_sky_task(tmp_path), "lm", "reader", methods=["fid"])
    cfg["reader"] = {**cfg["reader"], **reader}
    return cfg


def test_a_dry_run_without_cuda_prices_the_gpu_fits_when_the_config_asks_for_gpus(tmp_path, monkeypatch):
    """On a login node without CUDA, a config that asks for GPUs (CUDA graphs here) is priced with the GPU fits, and
    the plan says so; PGRA_PLAN_DEVICE chooses either way; a config asking for no GPU keeps the CPU fits, said too."""
    import torch

    from pgra.core.errors import InputError
    from pgra.experiment.estimate import gpu_requests, plan_costs, plan_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("PGRA_PLAN_DEVICE", raising=False)
    cfg = from_dict(ExperimentConfig, _gpu_asking_config(tmp_path, compile=True, compile_mode="reduce-overhead"))
    assert gpu_requests(cfg) == ["reader.compile_mode=reduce-overhead (CUDA graphs)"]
    device, why = plan_device(cfg)
    assert device == "gpu" and "this machine has no CUDA, but the config asks for GPUs" in why
    text = Experiment(cfg).describe(workers=1)
    assert "fits: the GPU's: this machine has no CUDA, but the config asks for GPUs (reader.compile_mode=" \
           "reduce-overhead (CUDA graphs)), so the plan prices the GPU fits" in text
    assert "compile+cudagraphs not measured: priced as fused+compile+cudagraphs" in text  # foreach AdamW here
    plan = plan_costs(Experiment(cfg), workers=1)
    assert {e.device for e in plan.cells} == {"gpu"} and "disk writes:" in "\n".join(plan.summary())
    monkeypatch.setenv("PGRA_PLAN_DEVICE", "cpu")
    assert plan_device(cfg)[0] == "cpu" and "PGRA_PLAN_DEVICE=cpu" in plan_device(cfg)[1]
    assert {e.device for e in plan_costs(Experiment(cfg), workers=1).cells} == {"cpu"}
    monkeypatch.setenv("PGRA_PLAN_DEVICE", "tpu")
    with pytest.raises(InputError, match="field .PGRA_PLAN_DEVICE.: tpu: must be one of"):
        plan_device(cfg)
    monkeypatch.delenv("PGRA_PLAN_DEVICE")
    (tmp_path / "plain").mkdir()
    plain = from_dict(ExperimentConfig, {**_gpu_asking_config(tmp_path / "plain"), "out": str(tmp_path / "p")})
    assert gpu_requests(plain) == [] and plan_device(plain)[0] == "cpu"
    assert "fits: the CPU's (this machine has no CUDA and the config asks for no GPU" in \
        Experiment(plain).describe(workers=1)
    monkeypatch.setenv("PGRA_PLAN_DEVICE", "cuda")
    assert plan_device(plain) == ("gpu", "the GPU's, as PGRA_PLAN_DEVICE=cuda asks")


def test_a_first_run_orders_cells_costliest_first_by_the_plan(tmp_path):
    """No cost record yet: the plan orders the cells (readers first, then by planned seconds: FiD's d=3 before no
    retrieval's one sequence, both before the kNN vote, unpriced)."""
    from pgra.experiment.estimate import plan_costs, plan_order

    cfg = _gpu_asking_config(tmp_path)
    cfg["methods"] = ["knn_vote", "no_retrieval", "fid"]
    exp = Experiment(from_dict(ExperimentConfig, cfg))
    cells = exp.plan()
    fits = BenchFits.load(Path(__file__).resolve().parents[1] / "bench" / "results", "gpu")
    plan = plan_costs(exp, cells, 1, fits)
    ordered = [(c.method, c.seed) for c in plan_order(exp, cells, plan)]
    assert ordered == [("fid", 1), ("fid", 2), ("no_retrieval", 1), ("no_retrieval", 2), ("knn_vote", 1)]
    assert [c.method for c in cells][0] == "knn_vote"  # the plan's own order differs


def test_the_plan_prices_a_gpu_cells_disk_with_the_readers_cosmetic_settings(tmp_path):
    """`reader.keep_resume_state` and `keep_checkpoints` are in no key, so in no cell settings: the plan still
    passes them to the GPU cell's price (a done cell keeps its checkpoints only when told)."""
    from pgra.experiment.estimate import BenchFits, plan_costs

    fits = BenchFits.load(Path(__file__).resolve().parents[1] / "bench" / "results", "gpu")
    kept = {}
    for keep in (False, True):
        (tmp_path / str(keep)).mkdir()
        cfg = _gpu_asking_config(tmp_path / str(keep), keep_resume_state=keep)
        plan = plan_costs(Experiment(from_dict(ExperimentConfig, cfg)), workers=1, fits=fits)
        (cell,) = [e for e in plan.cells if e.label.endswith("fid/seed-1")]
        kept[keep] = cell.kept_bytes
    assert kept[False] == pytest.approx(fits.overheads.best_bytes)
    assert kept[True] == pytest.approx(kept[False] + fits.overheads.checkpoint_bytes)


def test_cpu_cells_are_priced_with_their_fixed_costs_by_hand():
    """On a CPU, what the step and reranking fits leave out (cpu_cell_costs.json: loads, saves, set-up; in-context
    learning, kNN votes and the candidates stage, which have no fit) is priced per kind: fixed + inputs x per input."""
    costs = CpuCellCosts({"reader": (3.0, 0.01), "icl": (2.0, 0.1), "cell": (1.0, 0.002), "candidates": (0.5, 0.004),
                          "reranked": (-20.0, 0.0), "command": (5.0, 0.0)}, 4, "bench X")
    fits = BenchFits("cpu", reader=(0.24, 0.2), reader_batch=8, reader_source="fit", rerank=(4.0, 0.05),
                     rerank_source="fit R", cpu_cells=costs)
    splits = {"sky": {"train": 40, "dev": 10, "test": 20}}
    reader = {"max_steps": 100, "n_passages": 4, "batch_size": 16, "eval_every": 25, "max_eval_examples": 6}
    # 4 dev evaluations of at most 6 inputs, then the whole dev and test splits: 24 + 10 + 20
    assert evaluated_inputs(reader, splits["sky"]) == 54 and evaluated_inputs(reader, None) is None
    cell = estimate_cell("sky", "fid", {"reader": reader}, [], {"sky": 70}, fits, splits)
    assert cell.seconds == pytest.approx(100 * (0.24 + 0.2 * 4) * 2 + 3.0 + 54 * 0.01)
    assert "plus 3.0 s fixed + 54 x 10 ms per evaluated input" in cell.source and "bench X" in cell.source
    icl = estimate_cell("sky", "icl_kate", {"icl": {"num_demos": 9}, "splits": ["test"]}, [], {"sky": 70}, fits, splits)
    assert icl.seconds == pytest.approx(2.0 + 20 * 0.1 * 10 / 5)  # at 9 demonstrations: x (9 + 1) / (4 + 1)
    vote = estimate_cell("sky", "knn_vote", {"k": 3}, [], {"sky": 70}, fits, splits)
    assert vote.seconds == pytest.approx(1.0 + 70 * 0.002)
    assert estimate_stage("sky", "candidates", False, [], {"sky": 70}, fits,
                          _priced("candidates", fits, 70)).seconds == pytest.approx(0.5 + 0.28)
    # a negative fixed part corrects a fit that overprices, never below 0
    assert estimate_stage("sky", "reranked", False, [], {"sky": 70}, fits, _priced("reranked", fits, 70, 100)).seconds == 0.0
    assert estimate_stage("sky", "reranked", False, [], {"sky": 70}, fits, _priced("reranked", fits, 70, 1000)).seconds == \
        pytest.approx(4.0 + 50.0 - 20.0)
    # without the file (another machine's checkout): unknown, as before
    bare = BenchFits("cpu", reader=(0.24, 0.2), reader_batch=8)
    assert estimate_cell("sky", "knn_vote", {"k": 3}, [], {"sky": 70}, bare, splits).seconds is None


def test_cpu_prices_scale_with_the_cores_each_worker_computes_on(planned, tmp_path, monkeypatch):
    """The CPU benches ran on 2 threads: a worker on 1 core (2 workers on 2 cores, or OMP_NUM_THREADS=1) takes twice
    as long for every bench-priced second, one on half a core (4 workers on 2 cores) four times; storing the frozen
    layers' outputs was measured on one thread; a cell's record scales by the threads it recorded; more cores than
    the measurement's are not assumed faster."""
    costs = CpuCellCosts({"reader": (3.0, 0.01), "icl": (2.0, 0.1), "reranked": (-1.0, 0.0)}, 4, "bench X")
    fits = BenchFits("cpu", reader=(0.24, 0.2), reader_batch=8, rerank=(4.0, 0.05), cpu_cells=costs,
                     top_layers={4: [(0, 0.2), (1, 0.25), (6, 1.0)]}, top_layers_store={4: [(0, 0.1), (1, 0.07)]})
    splits = {"sky": {"train": 40, "dev": 10, "test": 20}}
    reader = {"max_steps": 100, "n_passages": 4, "batch_size": 16, "eval_every": 25, "max_eval_examples": 6}

    def prices():
        return [estimate_cell("sky", "fid", {"reader": reader}, [], {"sky": 70}, fits, splits).seconds,
                estimate_cell("sky", "icl_kate", {"icl": {"num_demos": 4}}, [], {"sky": 70}, fits, splits).seconds,
                estimate_stage("sky", "reranked", False, [], {"sky": 70}, fits, _priced("reranked", fits, 70, 1000)).seconds,
                fits.reader_seconds(100, 4, 16, 1, 6, 70)]

    one = prices()  # explicit fits without cpu_threads (the bench's own check): as measured
    assert one[0] == pytest.approx(100 * (0.24 + 0.2 * 4) * 2 + 3.0 + 54 * 0.01)
    # what DDP ranks would split: the steps, not the fixed part; a frozen encoder's stored outputs neither
    fid = estimate_cell("sky", "fid", {"reader": reader}, [], {"sky": 70}, fits, splits)
    assert fid.split_s == pytest.approx(100 * (0.24 + 0.2 * 4) * 2)
    (tmp_path / "six").mkdir()
    (tmp_path / "six" / "config.json").write_text(json.dumps({"num_layers": 6}))
    top = {**reader, "model": str(tmp_path / "six"), "train_top_layers": 1}
    frozen = estimate_cell("sky", "fid", {"reader": top}, [], {"sky": 70}, fits, splits)
    assert frozen.split_s == pytest.approx(fits.reader_seconds(100, 4, 16, 1, 6, 70) - 70 * 0.07)
    assert frozen.seconds - frozen.split_s == pytest.approx(70 * 0.07 + 3.0 + 54 * 0.01)  # storing + fixed
    assert one[3] == pytest.approx(100 * (0.24 + 0.2 * 4) * 2 * 0.25 + 70 * 0.07)
    fits.cpu_threads = 1.0
    assert fits.thread_factor() == 2.0 and fits.thread_factor(1) == 1.0
    assert prices()[:3] == pytest.approx([2 * x for x in one[:3]])
    assert prices()[3] == pytest.approx(100 * (0.24 + 0.2 * 4) * 2 * 0.25 * 2 + 70 * 0.07)  # storing: 1 thread
    fits.cpu_threads = 0.5  # 4 workers on 2 cores
    assert prices()[:3] == pytest.approx([4 * x for x in one[:3]])
    assert prices()[3] == pytest.approx(100 * (0.24 + 0.2 * 4) * 2 * 0.25 * 4 + 70 * 0.07 * 2)
    fits.cpu_threads = 16.0
    assert prices() == pytest.approx(one) and BenchFits("gpu", cpu_threads=1.0).thread_factor() == 1.0
    # a cell's record: x its threads over the worker's, never below its own seconds
    record = {**_cell("sky", "fid", 100.0, settings={"reader": reader}, device={"device": "cpu", "torch_threads": 2}),
              "key": "k"}
    fits.cpu_threads = 1.0
    recorded = estimate_cell("sky", "fid", {"reader": reader}, [("sky/fid/seed-1", record)], {"sky": 70}, fits)
    assert recorded.seconds == pytest.approx(200.0) and "x 2 for 1 core(s) a worker" in recorded.source
    fits.cpu_threads = 8.0
    assert estimate_cell("sky", "fid", {"reader": reader}, [("sky/fid/seed-1", record)], {"sky": 70},
                         fits).seconds == pytest.approx(100.0)
    # the cores of a worker: this machine's shared among the workers, at most a rank's OMP_NUM_THREADS
    monkeypatch.setattr("pgra.runtime.device.node_cores", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert (worker_threads(1), worker_threads(4), worker_threads(16)) == (8, 2, 0.5)
    slurm = type("Slurm", (), {"cluster": "slurm", "cpus_per_worker": 4})()
    assert worker_threads(2, "slurm", slurm) == 4 and worker_threads(2, "slurm", None) is None
    slurm.cluster = "local"  # submitit's local executor: this machine's cores
    assert worker_threads(16, "slurm", slurm) == 0.5
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert worker_threads(1) == 1
    # under torchrun, a launcher's default OMP_NUM_THREADS=1 is the cores over the node's ranks
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr("pgra.runtime.device._launcher_start_env", lambda: {})
    assert worker_threads(2) == 4
    # the plan: 2 workers on 2 cores price each bench-priced CPU cell at twice its 1-worker seconds, and say why
    monkeypatch.setattr("pgra.runtime.device.node_cores", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setenv("PGRA_PLAN_DEVICE", "cpu")
    exp = Experiment(from_dict(ExperimentConfig, {**planned, "out": str(tmp_path / "fresh")}))  # no records
    from pgra.experiment.estimate import plan_costs

    solo, pair = plan_costs(exp, workers=1, as_new=True), plan_costs(exp, workers=2, as_new=True)
    bench = [(a.seconds, b.seconds) for a, b in zip(solo.cells, pair.cells, strict=True) if "bench" in a.source]
    assert bench and all(b == pytest.approx(2 * a) for a, b in bench)
    assert "bench-priced CPU work x 2: each of the 2 worker(s) computes on 1 core(s)" in pair.note
    assert "CPU work x" not in solo.note
    assert all(b == pytest.approx(4 * a) for a, b in zip((e.seconds for e in solo.cells if "bench" in e.source),
                                                          (e.seconds for e in plan_costs(exp, workers=4, as_new=True)
                                                           .cells if "bench" in e.source), strict=True))


def test_the_bench_fixed_costs_price_the_tutorials_smoke_run():
    """cpu_cell_costs.json, as bench_cpu_cell_costs.py wrote it: every kind the estimator reads, and its check (the
    tutorial's --limit 8 run, planned before it ran) within 2x of what it took."""
    data = json.loads((RESULTS / CPU_CELL_COSTS).read_text())
    assert {"reader", "icl", "cell", "candidates", "reranked", "command"} <= set(data["kinds"])
    assert data["check"]["limit"] == 8 and data["check"]["unpriced"] == []
    assert 0.5 <= data["check"]["ratio"] <= 2.0
    assert CpuCellCosts.load(RESULTS / CPU_CELL_COSTS).parts["icl"][1] > 0


def test_launcher_workers_build_each_tasks_stages_in_one_job(planned, monkeypatch):
    """--launcher local|slurm starts separate one-process jobs: a task's stages are built by the job that claims
    them (not sharded), the tasks' side by side; without a launcher, --workers prices a launch of that many ranks,
    which share each stage."""
    from pgra.experiment.estimate import Estimate, Plan, plan_costs

    stages = [Estimate.at("a/candidates", 10.0, "x"), Estimate.at("a/reranked", 50.0, "x"),
              Estimate.at("b/candidates", 20.0, "x"), Estimate.at("b/reranked", 30.0, "x")]
    assert Plan(stages, [], 4).wallclock() == (110.0 / 4, 0.0)  # one launch's ranks share each stage
    assert Plan(stages, [], 4, separate_jobs=True).wallclock() == (60.0, 0.0)  # a: 60 s, b: 50 s, side by side
    assert Plan(stages, [], 1, separate_jobs=True).wallclock() == (110.0, 0.0)
    # --workers 4 on 2 GPUs (cells_per_gpu 2): a worker leaves the stages to its GPU's first worker, so the tasks'
    # stages run side by side on the 2 GPUs; --workers 2 on 1 GPU: one after another
    two_gpus = Plan(stages, [], 4, cells_per_gpu=2, separate_jobs=True)
    assert two_gpus.wallclock() == (60.0, 0.0) and Plan(stages, [], 2, cells_per_gpu=2,
                                                        separate_jobs=True).wallclock() == (110.0, 0.0)
    assert "the tasks side by side, one a GPU" in two_gpus.summary()[-1]
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    plan = plan_costs(Experiment(from_dict(ExperimentConfig, planned)))
    assert (plan.workers, plan.separate_jobs) == (1, False)
    plan = plan_costs(Experiment(from_dict(ExperimentConfig, {**planned, "workers": 4})))
    assert (plan.workers, plan.separate_jobs) == (4, False)
    plan = plan_costs(Experiment(from_dict(ExperimentConfig, {**planned, "workers": 4, "launcher": "local"})))
    assert (plan.workers, plan.separate_jobs) == (4, True)
    assert "each task's built by one job, the tasks side by side" in "\n".join(plan.summary())
    # parallel: ddp: the seed-2 cell trained by the 4 ranks together, its training loop (80 of the recorded
    # seed-1 cell's 100 s, on one process) split among them
    exp = Experiment(from_dict(ExperimentConfig, {**planned, "workers": 4, "parallel": "ddp"}))
    done = next(c for c in exp.plan() if c.seed == 1).directory / CELL_FILE
    record = json.loads(done.read_text())
    record["cost"]["split_s"] = 80.0
    done.write_text(json.dumps(record))
    plan = plan_costs(exp)
    assert plan.ddp and [e.split_s for e in plan.cells] == [0.0, 80.0] and plan.wallclock()[1] == 20.0 + 80.0 / 4
    assert "one after another (DDP): a reader's training split among the workers" in "\n".join(plan.summary())


def test_the_dry_runs_plan_the_models_and_the_analyses_embedding_caches(tmp_path, corpus_txt, sky_task, tiny_opt,
                                                                        tiny_t5, capsys):
    """Issue 71.5: `pgra experiment --dry-run` sizes the models the grid loads (a local folder at its size, a Hub
    model not here by its parameters x its checkpoint's bytes a parameter) and the embedding cache of each further LM
    the analyses rerank with (the experiment's reranked texts x that LM's hidden size x 4 B) with its download;
    `pgra analyze --dry-run` gives the same, with its grids'."""
    import yaml

    from pgra.experiment.estimate import format_bytes, plan_costs
    from pgra.runtime.sizes import KNOWN_MODELS, folder_bytes

    cfg = _config(tmp_path, corpus_txt, sky_task, tiny_opt, tiny_t5, methods=["pgra"], seeds=[1], report=False,
                  analysis={"analyses": ["consistency"], "consistency": {"rerank_lms": ["facebook/opt-350m"]}})
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    disk = plan_costs(Experiment(from_dict(ExperimentConfig, cfg)), workers=1).disk
    mine = {str(tiny_opt): folder_bytes(tiny_opt), str(tiny_t5): folder_bytes(tiny_t5)}
    assert disk.models == pytest.approx(mine) and disk.cache > 0
    assert main(["experiment", "--config", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"  models: {format_bytes(sum(mine.values()))} ({tiny_opt} {format_bytes(mine[str(tiny_opt)])} (here); " \
           f"{tiny_t5} {format_bytes(mine[str(tiny_t5)])} (here))" in out
    assert f"  with the models: {format_bytes(disk.total + sum(mine.values()))}" in out
    params, width, dim = KNOWN_MODELS["facebook/opt-350m"]
    cache = disk.cache / json.loads((tiny_opt / "config.json").read_text())["hidden_size"] * dim
    block = out[out.index("disk, estimated for the analyses (beyond the experiment's grid):"):]
    assert block[1] == f"  the embedding caches of their rerankings: up to {format_bytes(cache)} (x each LM's " \
                       "hidden size x 4 B)"
    assert block[2] == f"  models: {format_bytes(params * width)} (facebook/opt-350m {format_bytes(params * width)} " \
                       "to download (331.2M x 2 B))"
    assert block[3].startswith(f"  total: {format_bytes(cache + params * width)}; with the grid's and its models: ")
    assert main(["analyze", "--config", str(path), "--dry-run"]) == 0
    analyzed = capsys.readouterr().out.splitlines()
    assert analyzed[-4:] == block[:4]
