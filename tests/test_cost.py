# numerics: cost records added up (seconds, FLOPs) in Python floats
"""What stages and cells spend (pgra.runtime.cost): the token meter against each model's own counts, parameter
counts against the loaded models, FLOPs and dominance by hand."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from pgra.analysis.costs import borrowed_pass, cost_table, dominated
from pgra.analysis.results import ResultsRuns
from pgra.runtime.cost import estimated_flops, merge_work, meter, metered, parameter_counts, work_since
from pgra.storage.artifacts import sha256_file
from tests.conftest import SENTENCES


def test_parameter_counts_match_the_loaded_models(tiny_t5, tiny_bert):
    from transformers import AutoModel, AutoModelForSeq2SeqLM

    t5 = AutoModelForSeq2SeqLM.from_pretrained(str(tiny_t5))
    counts = parameter_counts(tiny_t5)
    assert counts["all"] == sum(p.numel() for p in t5.parameters())  # tied embeddings once
    assert counts["encoder"] == sum(p.numel() for n, p in t5.named_parameters() if n.startswith("encoder."))
    assert counts["decoder"] == sum(p.numel() for n, p in t5.named_parameters() if n.startswith("decoder."))
    bert = AutoModel.from_pretrained(str(tiny_bert))
    assert parameter_counts(tiny_bert)["all"] == sum(p.numel() for p in bert.parameters())
    assert parameter_counts(tiny_t5.parent / "nothing-here") is None


def test_flops_and_merging_by_hand():
    work = [{"model": "a", "part": "all", "mode": "forward", "tokens": 10},
            {"model": "r", "part": "encoder", "mode": "trained", "tokens": 3},
            {"model": "r", "part": "decoder", "mode": "forward", "tokens": 5}]
    params = {"a": {"all": 100}, "r": {"all": 50, "encoder": 20, "decoder": 30}}
    assert estimated_flops(work, params) == 2 * 100 * 10 + 6 * 20 * 3 + 2 * 30 * 5
    assert estimated_flops(work, {**params, "a": None}) is None
    assert merge_work([work[:2], work[:1]])[0] == {"model": "a", "part": "all", "mode": "forward", "tokens": 20}
    # a part the model folder does not name is priced by its record's own parameters, never as the whole model
    top = {"model": "r", "part": "encoder top layers", "mode": "trained", "tokens": 4}
    assert estimated_flops([top], params) is None
    assert estimated_flops([{**top, "parameters": 7}], params) == 6 * 7 * 4
    assert estimated_flops([{**top, "parameters": 7}], {}) == 6 * 7 * 4  # no model folder needed
    assert merge_work([[{**top, "parameters": 7}], [top]]) == [{**top, "tokens": 8, "parameters": 7}]


def test_dominance_by_hand():
    rows = [{"method": "cheap_good", "metric": 0.8, "flops": 1.0}, {"method": "dear_good", "metric": 0.8, "flops": 5.0},
            {"method": "dear_best", "metric": 0.9, "flops": 9.0}, {"method": "cheap_bad", "metric": 0.5, "flops": 1.0},
            {"method": "unknown", "metric": 0.99, "flops": None}]
    d = dominated(rows, "flops")
    assert d == {"cheap_good": [], "dear_good": ["cheap_good"], "dear_best": [], "cheap_bad": ["cheap_good"]}


def test_the_meter_counts_what_each_model_ran(tiny_opt, tiny_bert):
    from pgra.lm.label_scoring import LabelScorer
    from pgra.rerank.prompt_guided.embedder import LMEmbedder
    from pgra.retrieval.encoder import DenseEncoder

    before = meter.snapshot()
    scorer = LabelScorer(str(tiny_opt), dtype="fp32", max_tokens_per_batch=300, max_batch_size=3)
    scorer.score([f"{s} It is about" for s in SENTENCES], ["the sky", "a town"])
    emb = LMEmbedder(str(tiny_opt), dtype="fp32", max_tokens_per_batch=600, max_batch_size=5)
    emb.embed_full(SENTENCES[:5], batch_size=2)
    enc = DenseEncoder(str(tiny_bert), pooler="mean", batch_size=3, max_length=16)
    enc.encode(SENTENCES)
    lengths = [len(x) for x in enc.tokenizer(SENTENCES, truncation=True, max_length=16)["input_ids"]]
    assert work_since(before) == [
        {"model": str(tiny_bert), "part": "all", "mode": "forward", "tokens": sum(lengths)},
        {"model": str(tiny_opt), "part": "all", "mode": "forward",
         "tokens": scorer.stats.tokens_run + emb.stats.tokens_run}]


def test_metered_block_records_time_hardware_and_work():
    with metered() as cost:
        meter.add("m", 7)
        meter.add("m", 2, "decoder", "trained")
        meter.add("m", 3, "encoder top layers", "trained", parameters=11)
    assert cost["work"] == [{"model": "m", "part": "all", "mode": "forward", "tokens": 7},
                            {"model": "m", "part": "decoder", "mode": "trained", "tokens": 2},
                            {"model": "m", "part": "encoder top layers", "mode": "trained", "tokens": 3,
                             "parameters": 11}]
    assert cost["elapsed_s"] >= 0 and cost["hardware"]["device"] == ("cpu" if not torch.cuda.is_available() else
                                                                    torch.cuda.get_device_name(0))
    with pytest.raises(KeyError):
        estimated_flops([{"model": "m", "part": "all", "mode": "sideways", "tokens": 1}], {"m": {"all": 1}})
    # one process: one device, at most its torch threads (and its share of the cores it may run on)
    assert cost["processes"] == 1 and cost["devices"] == 1
    assert 0 < cost["hardware"]["cores_each"] <= torch.get_num_threads()


def test_a_stage_counts_the_seconds_of_every_device_that_built_it():
    """The cost table's seconds are one device's: a stage built by several processes (GPUs) together counts its
    wall-clock times their number; a record from before pgra wrote them counts once."""
    from pgra.runtime.cost import device_seconds

    cpu, gpu = {"device": "cpu"}, {"device": "NVIDIA H100 80GB HBM3"}
    assert device_seconds({"elapsed_s": 100.0, "processes": 2, "hardware": cpu}) == 200.0
    assert device_seconds({"elapsed_s": 100.0, "hardware": cpu}) == 100.0
    # 8 ranks on 4 GPUs (two a GPU): 4 GPUs' time
    assert device_seconds({"elapsed_s": 60.0, "processes": 8, "devices": 4, "hardware": gpu}) == 240.0
    assert device_seconds({"elapsed_s": 60.0, "processes": 8, "hardware": gpu}) == 480.0
    assert device_seconds({"elapsed_s": 60.0, "processes": "8", "hardware": gpu}) == 60.0  # edited by hand
    assert device_seconds({"elapsed_s": 60.0, "processes": float("inf"), "hardware": cpu}) == 60.0
    assert device_seconds({"elapsed_s": 60.0, "processes": True, "hardware": cpu}) == 60.0


BUNDLE = Path(__file__).resolve().parents[1] / "docs" / "results" / "laptop" / "mr-analyses"


def _rows(source: Path, out: Path) -> dict[str, dict]:
    runs = ResultsRuns.merged([source], out, ["cost"])
    return {r["method"]: r for r in cost_table(runs)}


def test_a_replayed_corpus_pass_is_counted_for_the_method_that_read_it(tmp_path):
    """The committed MR analyses bundle: its reranked stage ran the whole-corpus pass, its full search replayed it
    from the cache; pgra_full's cost counts the pass in full, by hand from the records."""
    rows = _rows(BUNDLE, tmp_path / "out")
    manifest = json.loads((BUNDLE / "mr" / "reranked" / "manifest.json").read_text())
    corpus_pass = manifest["corpus_pass"]
    assert corpus_pass["cached_before"] == 0 and corpus_pass["tokens_run"] > 0  # the reranked stage ran it
    cell = json.loads((BUNDLE / "mr" / "pgra_full" / "seed-1" / "cell.json").read_text())["cost"]
    search = json.loads((BUNDLE / "mr" / "full_search" / "cost.json").read_text())
    full = rows["pgra_full"]
    assert full["stages"] == ["full_search", "reranked (its corpus pass)"]
    assert full["elapsed_s"] == pytest.approx(cell["elapsed_s"] + search["elapsed_s"] + corpus_pass["seconds"])
    assert full["tokens"] == sum(w["tokens"] for w in cell["work"]) + sum(w["tokens"] for w in search["work"]) + \
        corpus_pass["tokens_run"]
    assert full["flops"] is not None and "pgra_full" not in (rows["pgra"]["dominated_by_time"] or [])
    # PGRA's own stage ran the pass: nothing borrowed
    assert rows["pgra"]["stages"] == ["candidates", "reranked"]
    # without the stage that ran the pass (a bundle of another piece), nothing is borrowed
    copy = tmp_path / "copy"
    shutil.copytree(BUNDLE, copy)
    runs = ResultsRuns.merged([copy], tmp_path / "out2", ["cost"])
    edited = json.loads((copy / "mr" / "reranked" / "manifest.json").read_text())
    edited["corpus_pass"]["tokens_run"] = "many"  # a manifest edited by hand: no pass read from it, no traceback
    (copy / "mr" / "reranked" / "manifest.json").write_text(json.dumps(edited))
    assert borrowed_pass(runs, "mr", ["full_search"]) is None
    shutil.rmtree(copy / "mr" / "reranked")
    assert borrowed_pass(runs, "mr", ["full_search"]) is None


def test_a_cell_trained_by_several_processes_counts_its_training_loop_on_each(tmp_path):
    """A reader's cell trained under ``parallel: ddp`` records its training loop's seconds and the processes that
    split them: the cost table counts the loop once per process and the rest (loads, the main process's final
    predictions) once."""
    copy = tmp_path / "copy"
    shutil.copytree(BUNDLE, copy)
    path = copy / "mr" / "fid" / "seed-1" / "cell.json"
    record = json.loads(path.read_text())
    elapsed = record["cost"]["elapsed_s"]
    before = _rows(copy, tmp_path / "before")["fid"]
    assert before["cell_elapsed_s"] == pytest.approx(elapsed)  # one process
    record["cost"].update(processes=2, devices=1, split_s=elapsed - 10.0)
    path.write_text(json.dumps(record))
    manifest = json.loads((copy / "manifest.json").read_text())  # sealed again, as a bundle of such a run would be
    manifest["files"]["mr/fid/seed-1/cell.json"] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    (copy / "manifest.json").write_text(json.dumps(manifest))
    after = _rows(copy, tmp_path / "after")["fid"]
    assert after["cell_elapsed_s"] == pytest.approx(2 * elapsed - 10.0)
    assert after["elapsed_s"] - before["elapsed_s"] == pytest.approx(elapsed - 10.0)


def test_a_number_too_large_for_a_float_is_no_finite_number():
    """A record edited by hand may hold a 400-digit integer: read as no number, never an OverflowError."""
    from pgra.runtime.cost import finite_number

    assert finite_number(3) and finite_number(0.5) and not finite_number(True)
    assert not finite_number(10 ** 400) and not finite_number(float("nan")) and not finite_number("1")
