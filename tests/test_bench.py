# numerics: the benchmarks' bookkeeping (sums, ratios, fits of hand-made rows) in float64; no result of a model
"""The GPU-scale benchmark runs end to end at tiny sizes on CPU (on a GPU it measures the paper's sizes)."""

import json
import math
from pathlib import Path

import pytest

from tests import numerics
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def _module():
    return load_script("bench/bench_gpu_scale.py")


def test_gpu_scale_bench_at_tiny_sizes_on_cpu(tmp_path):
    out = tmp_path / "gpu_scale.json"
    result = _module().main(["--tiny", "--device", "cpu", "--rerankers", "opt-350m,opt-13b", "--readers", "t5-base",
                             "--reader-variants", "eager,fused", "--loop-variants", "eager", "--profile", "2",
                             "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["device"] == "cpu" and result["tiny"] and result["bf16_peak_flops"] is None
    assert [r["model"] for r in result["rerank"]] == ["opt-350m", "opt-13b"]
    assert all(r["texts_per_s"] > 0 and r["tokens_per_s"] > r["texts_per_s"] for r in result["rerank"])
    assert result["readers"][0]["s_per_step"] > 0 and result["encoding"]["sentences_per_s"] > 0
    profile = result["readers"][0]["profile"]  # where the step's time goes: the costliest operators first
    ops = profile["ops"]
    assert 0 < len(ops) <= 15 and all(p["self_ms_per_step"] > 0 and p["calls_per_step"] > 0 for p in ops)
    assert [p["self_ms_per_step"] for p in ops] == sorted((p["self_ms_per_step"] for p in ops), reverse=True)
    assert 0 < sum(p["share"] for p in ops) <= 1 + numerics.tolerance("float64", len(ops)) and any("addmm" in p["op"] or "mm" in p["op"] for p in ops)
    # the listed operators are part of the device's total, and the step took at least that long
    assert sum(p["self_ms_per_step"] for p in ops) <= profile["device_ms_per_step"] * (1 + numerics.tolerance("float64", len(ops)))
    assert profile["calls_per_step"] >= sum(p["calls_per_step"] for p in ops)
    encoding = result["encoding"]["profile"]["ops"]  # the encoder's batches are profiled too
    assert 0 < len(encoding) <= 15 and all(p["calls_per_step"] > 0 for p in encoding)
    eager, fused = result["readers"]  # each variant on the same seeded batches, through pgra's own optimizer
    assert (eager["variant"], fused["variant"]) == ("eager", "fused") and eager["speedup"] == 1.0
    assert fused["max_loss_diff"] <= max(fused["losses"]) * numerics.tolerance(depth=numerics.trained(3, numerics.TINY_SEQ2SEQ)) and len(fused["losses"]) == 3 and fused["speedup"] > 0
    # pgra's own training loop on random words, timed beside the bare step it wraps
    (loop,) = result["loops"]
    assert loop["variant"] == "eager" and loop["s_per_step"] > 0 and len(loop["losses"]) == 3
    assert all(math.isfinite(x) and x > 0 for x in loop["losses"])
    assert loop["loop_overhead_s"] == pytest.approx(loop["s_per_step"] - eager["s_per_step"])
    cost = result["table2_grid"]
    assert cost["reader_variant"] in ("eager", "fused")
    assert cost["total_hours"] == pytest.approx(cost["index_hours"] + cost["rerank_hours"] + cost["reader_hours"])


def test_gpu_scale_reader_variants_are_parts_joined_by_plus():
    parts = _module().variant_parts
    assert parts("eager") == {"eager"} and parts("fused+compile") == {"fused", "compile"}
    assert parts("cudagraphs") == {"cudagraphs", "compile"}  # CUDA graphs are a compile mode
    for bad in ("", "eager+fused", "fused+fast", "compiled"):
        with pytest.raises(ValueError, match="parts are"):
            parts(bad)


def test_gpu_scale_bench_keeps_the_other_stages_when_one_fails(tmp_path, monkeypatch, capsys):
    mod = _module()
    monkeypatch.setattr(mod, "bench_reranker", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("CUDA OOM")))
    out = tmp_path / "gpu_scale.json"
    result = mod.main(["--tiny", "--device", "cpu", "--rerankers", "opt-350m", "--readers", "t5-base",
                       "--out", str(out)])
    assert "rerank opt-350m: FAILED RuntimeError: CUDA OOM" in capsys.readouterr().out
    assert result["rerank"] == [] and result["readers"][0]["s_per_step"] > 0 and result["table2_grid"] is None
    assert json.loads(out.read_text())["readers"][0]["variant"] == "eager"


def test_grid_cost_by_hand():
    mod = _module()
    cost = mod.grid_cost({"corpus_encode_hours": 0.5}, {"texts_per_s": 151.0, "model": "opt-13b"},
                         {"s_per_step": 0.36, "batch": 8, "model": "t5-base"})
    inputs = sum(train + test for train, test, _ in mod.TASKS.values())  # 8 tasks' train + test inputs
    assert cost["rerank_texts"] == inputs * 151 and cost["rerank_hours"] == pytest.approx(inputs / 3600)
    # 6 tasks at batch 8 and 2 at batch 4 (half the step time), 3 seeds, FiD + PGRA + a 1/16 no-retrieval step
    steps = 5000 * 0.36 * 3 * (2 + 1 / 16)
    assert cost["reader_hours"] == pytest.approx((6 * steps + 2 * steps / 2) / 3600)


def test_cpu_bf16_bench_compares_by_hand():
    mod = load_script("bench/bench_cpu_bf16.py")
    ctx = lambda *pairs: [{"id": i, "score": s} for i, s in pairs]  # noqa: E731
    fp32 = [ctx(("a", 0.30), ("b", 0.26)), ctx(("c", 0.5), ("d", 0.4))]
    bf16 = [ctx(("b", 0.27), ("a", 0.29)), ctx(("c", 0.45), ("e", 0.4))]  # same set in another order; one swapped
    got = mod.compare_rerank(fp32, bf16)
    assert got["top_d_agreement"] == 0.5 and got["max_prob_diff"] == pytest.approx(0.05)  # c: 0.5 vs 0.45
    line = lambda pred, p: {"prediction": pred, "scores": {"x": p, "y": 1 - p}}  # noqa: E731
    got = mod.compare_icl([line("x", 0.9), line("y", 0.2), line("x", 0.6)], [line("x", 0.88), line("x", 0.55),
                                                                             line("x", 0.6)])
    assert got["label_agreement"] == pytest.approx(2 / 3) and got["max_prob_diff"] == pytest.approx(0.35)


def test_scaling_plot_fits_and_draws_hand_made_rows(tmp_path):
    mod = load_script("bench/plot_scaling.py")
    assert mod.line_fit([1, 2, 3], [5, 7, 9]) == pytest.approx((3.0, 2.0))
    assert mod.size_at(24, 0.5, 2.0) == pytest.approx(11.75) and mod.size_at(24, 1.0, 0.0) is None
    # memory 0.5 GiB + 3 GiB per million sentences: 24 GiB at 7.83M; build 1 s + 10 s per million
    sizes = [30_000, 100_000, 300_000, 1_000_000]
    dense = [{"docs": n, "dtype": "bf16", "build_s": 1 + 1e-5 * n, "build_peak_rss_gib": 0.5 + 3e-6 * n,
              "search_s": 1000 * (0.1 + 4e-6 * n) / 1e3, "queries": 1000} for n in sizes]
    (tmp_path / "dense_scale.json").write_text(json.dumps(dense))
    (tmp_path / "rerank_scale.json").write_text(json.dumps([{"k": k, "inputs": 8, "distinct": 7 * k,
                                                              "seconds": 0.1 * k} for k in (10, 50, 150)]))
    (tmp_path / "reader_scale.json").write_text(json.dumps([{"d": d, "s_per_step": 0.5 + 0.25 * d,
                                                              "peak_rss_gib": 1 + 0.1 * d} for d in (1, 4, 16)]))
    lines = mod.plot(tmp_path, tmp_path / "scaling.png", 24.0)
    assert (tmp_path / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert lines == ["MiniLM bf16: build 1.0 s + 10.0 s per million sentences; peak memory 0.50 GiB + 3.00 GiB per "
                     "million; search 0.10 ms + 4.00 ms per million per query; 24 GiB reached at about 7.8M "
                     "sentences"]


def test_collate_bench_reads_each_pair_once(tmp_path):
    mod = load_script("bench/bench_collate.py")
    rows = mod.main(["--inputs", "16", "--demo", str(tmp_path / "none")])  # the random-word task only
    (first, later), = rows.values()  # seconds a batch, epoch 1 and 2 (how much faster is the bench's to say)
    assert list(rows) == ["random words, cut to 128 tokens"] and first > 0 and later > 0


def test_cell_overheads_bench_times_pgras_own_checkpoints_at_their_sizes(tmp_path):
    """bench_cell_overheads.py at tiny size: pgra's resumable checkpoint holds the fp32 weights and AdamW's two
    moments (12 bytes a parameter, plus the scheduler, RNG and marker), best/ the weights (4 bytes a parameter), one
    checkpoint and one dev evaluation after each step, the reader loaded for training and again for the final
    evaluation."""
    mod = load_script("bench/bench_cell_overheads.py")
    parts = mod.cell_parts("t5-base", True, 2, tmp_path)
    n = parts["params"]
    assert 12 * n <= parts["checkpoint_bytes"] <= 12 * n * 1.05
    assert 4 * n <= parts["best_bytes"] <= 4 * n * 1.2
    assert len(parts["checkpoint_s"]) == 2 and len(parts["load_s"]) == 2 and 1 <= len(parts["best_s"]) <= 2
    assert parts["checkpoint_bytes_per_param"] == pytest.approx(parts["checkpoint_bytes"] / n)
