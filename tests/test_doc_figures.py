"""Every measured figure the README and the docs quote is what its committed record gives (issue 71):
scripts/doc_figures.py renders each ``<!-- fig ... -->`` span again and the pages must not differ; one record's
figure is shown on one page (the others link it); a span that names no record or no figure is an error line."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest

from tests.conftest import ROOT, demo_asset, load_script


@pytest.fixture(scope="module")
def figures():
    return load_script("scripts/doc_figures.py")


def test_every_figure_on_the_pages_is_its_records(figures):
    assert figures.differences() == [], "run python scripts/doc_figures.py --write"
    spans = [m["spec"] for page in figures.pages() for m in figures.SPAN.finditer(page.read_text(encoding="utf-8"))]
    assert len(spans) >= 8  # the disagreements issue 71 listed: set-up time, BM25, a T5 cell, IVF's sample ...


def _shown_on_several_pages(figures, root=ROOT):
    shown = defaultdict(set)
    for page in figures.pages(root):
        for m in figures.SPAN.finditer(page.read_text(encoding="utf-8")):
            shown[figures.identity(m["spec"], root)].add(page.relative_to(root).as_posix())
    return {key: pages for key, pages in shown.items() if len(pages) > 1}


def test_a_figure_is_shown_on_one_page_and_linked_from_the_others(figures):
    assert _shown_on_several_pages(figures) == {}


def test_one_figure_in_two_formats_or_spellings_is_one_figure(figures, tmp_path):
    """A record's value is one figure whatever its format, scale or path spelling: ``rows.type=a`` and ``rows.0``
    on two pages are the same figure shown twice; two values of one record are not."""
    root = _root(tmp_path, {"rows": [{"type": "a", "x": 3.03}, {"type": "b", "x": 1.0}]})
    (root / "docs" / "one.md").write_text(
        "<!-- fig json file=docs/results/r.json path=rows.type=a.x fmt={:.2f}x -->3.03x<!-- /fig -->\n")
    (root / "docs" / "two.md").write_text("<!-- fig json file=./docs/results/r.json path=rows.0.x -->3.0<!-- /fig -->"
                                          " <!-- fig json file=docs/results/r.json path=rows.1.x -->1.0<!-- /fig -->\n")
    (root / "README.md").write_text("")
    assert _shown_on_several_pages(figures, root) == {
        ("docs/results/r.json", ("rows", 0, "x")): {"docs/one.md", "docs/two.md"}}


def _root(tmp_path, record):
    (tmp_path / "docs" / "results").mkdir(parents=True)
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "README.md").write_text("")
    (tmp_path / "docs" / "results" / "r.json").write_text(json.dumps(record))
    (tmp_path / "docs" / "results" / "machines.json").write_text(json.dumps({"runs": [
        {"what": "demo", "cpu": "a", "commit": "c1", "cores": "idle", "after_setup_s": 1044, "with_setup_s": 1136},
        {"what": "demo", "cpu": "b", "commit": "c1", "cores": "busy", "after_setup_s": 1459, "with_setup_s": None}]}))
    return tmp_path


def test_a_changed_record_is_a_difference_and_write_renders_it(figures, tmp_path):
    root = _root(tmp_path, [{"docs": 1000, "a": 5.84, "b": 49.56}, {"docs": 2000, "a": 1.0, "b": 2.0}])
    page = root / "README.md"
    page.write_text("search <!-- fig json file=docs/results/r.json path=docs=1000.a fmt={:.1f}_ms -->5.8 ms<!-- /fig -->"
                    " (<!-- fig ratio file=docs/results/r.json num=docs=1000.b den=docs=1000.a -->4-5x<!-- /fig -->),"
                    " demo <!-- fig machines field=after_setup_s what=demo cores=idle -->0<!-- /fig -->,"
                    " slowest <!-- fig machines field=after_setup_s stat=max -->0<!-- /fig -->,"
                    " set-up <!-- fig machines field=setup_s stat=min -->0<!-- /fig -->\n")
    assert len(figures.differences(root)) == 4  # the hand-written 4-5x and the three times
    figures.write(root)
    assert page.read_text() == ("search <!-- fig json file=docs/results/r.json path=docs=1000.a fmt={:.1f}_ms -->5.8 ms"
                                "<!-- /fig --> (<!-- fig ratio file=docs/results/r.json num=docs=1000.b den=docs=1000.a"
                                " -->8.5x<!-- /fig -->), demo <!-- fig machines field=after_setup_s what=demo cores=idle"
                                " -->17 min 24 s<!-- /fig -->, slowest <!-- fig machines field=after_setup_s stat=max"
                                " -->24 min 19 s<!-- /fig -->, set-up <!-- fig machines field=setup_s stat=min -->"
                                "1 min 32 s<!-- /fig -->\n")
    assert figures.differences(root) == []


@pytest.mark.parametrize(("span", "says"), [
    ("json file=docs/results/none.json path=a", "no record docs/results/none.json"),
    ("json file=docs/results/r.json path=docs=3.a", "0 elements with docs=3"),
    ("json file=docs/results/r.json path=0.c", "no 'c'"),
    ("machines field=after_setup_s what=demo", "2 runs of docs/results/machines.json"),
    ("guess file=docs/results/r.json", "unknown kind 'guess'"),
    ("plan n_inputs=1000 n_seeds=3 field=inputs_needed", "the plan has no 'inputs_needed'"),
    ("plan n_seeds=3 field=mde", "no n_inputs="),
    ("json path", "'path' is not key=value"),
    ("json file=docs/results/r.json path=0.a -->5.8\n<!-- /fig", "without its <!-- /fig --> on the same line"),
])
def test_a_span_without_its_figure_is_one_error_line_naming_the_page(figures, tmp_path, span, says):
    root = _root(tmp_path, [{"docs": 1000, "a": 5.84}])
    (root / "README.md").write_text(f"<!-- fig {span} -->x<!-- /fig -->\n")
    with pytest.raises(SystemExit, match="error: README.md: .*" + says.replace("(", r"\(")):
        figures.differences(root)


def test_a_key_with_a_space_is_written_with_a_tilde(figures):
    """bench/results/cpu_bf16_reader.json's readers are keyed ``reader fid``: a span has no spaces in its keys."""
    record = {"reader fid": {"speedup": 2.94}, "rows": [{"kind": "a b", "x": 1}]}
    assert figures.pluck(record, "reader~fid.speedup") == 2.94
    assert figures.pluck(record, "rows.kind=a~b.x") == 1


def test_a_ratio_can_be_scaled(figures, tmp_path):
    """bench/README's "ms per distinct sentence" is seconds over sentences, times 1000."""
    root = _root(tmp_path, [{"k": 10, "seconds": 8.9, "distinct": 72}])
    assert figures.render("ratio file=docs/results/r.json num=k=10.seconds den=k=10.distinct scale=1000 fmt={:.0f}",
                          root) == "124"
    (root / "docs" / "results" / "before.json").write_text(json.dumps({"rate": 2.0}))
    assert figures.render("ratio file=docs/results/r.json num=0.seconds den=rate den_file=docs/results/before.json"
                          " fmt={:.2f}x", root) == "4.45x"  # a run against an earlier run's record


def test_a_jsonl_record_is_the_list_of_its_lines(figures, tmp_path):
    """bench/results/simcse_sweep_h100.jsonl holds one run a line."""
    root = _root(tmp_path, [])
    (root / "docs" / "results" / "sweep.jsonl").write_text('{"run": "base", "a": 0.349}\n{"run": "s30", "a": 0.32}\n')
    assert figures.render("json file=docs/results/sweep.jsonl path=run=s30.a fmt={:.3f}", root) == "0.320"


def test_a_stat_figure_is_over_the_elements_it_picks(figures, tmp_path):
    """docs/selectors.md's MR means and seed ranges are over bench/results/selectors_mr.json's seeds, not typed."""
    root = _root(tmp_path, {"rows": [{"s": "random", "acc": 0.58}, {"s": "random", "acc": 0.62},
                                     {"s": "random", "acc": 0.613}, {"s": "kate", "acc": 0.9}]})
    spec = "stat file=docs/results/r.json path=rows where=s=random field=acc scale=100"
    assert [figures.render(spec + of, root) for of in ("", " of=min", " of=max")] == ["60.4", "58.0", "62.0"]
    with pytest.raises(figures.FigureError, match="over 0 elements"):
        figures.render("stat file=docs/results/r.json path=rows where=s=dpp field=acc", root)
    with pytest.raises(figures.FigureError, match="of=median"):
        figures.render(spec + " of=median", root)


def test_a_plan_figure_is_the_resolution_pgra_plans(figures):
    """The MDE worked example (docs/experiments.md) is computed by pgra/evaluation/resolution.py, not typed."""
    from pgra.evaluation.resolution import inputs_needed, minimum_detectable_effect, planned_se

    assert figures.render("plan n_inputs=1000 n_seeds=3 field=mde scale=100 fmt={:.2f}") == \
        f"{100 * minimum_detectable_effect(planned_se(1000, 3)):.2f}"
    assert figures.render("plan n_inputs=1000 n_seeds=3 disagreement=0 field=mde scale=100 fmt={:.2f}") == \
        f"{100 * minimum_detectable_effect(planned_se(1000, 3, disagreement=0.0)):.2f}"
    assert figures.render("plan n_inputs=1000 n_seeds=20 field=inputs_needed fmt={:,}") == \
        f"{inputs_needed(0.006, 20):,}"


def test_a_table2_figure_is_the_planners(figures):
    """bench/README's Table 2 plan is bench/plan_table2.py's, rendered, not typed."""
    plans = {n: load_script("bench/plan_table2.py").plan(8, cells_per_gpu=n) for n in (1, 2)}
    assert figures.render("table2 field=total_s scale=0.000277778 fmt={:.2f}") == f"{plans[1]['total_s'] / 3600:.2f}"
    assert figures.render("table2 cells_per_gpu=2 field=cells_s scale=0.0166667 fmt={:.0f}") == \
        f"{plans[2]['cells_s'] / 60:.0f}"
    with pytest.raises(figures.FigureError, match="no 'days'"):
        figures.render("table2 field=days")


def test_a_marked_table_is_rendered_from_its_records(figures):
    """The selectors' table (bench/bench_selectors.py's, from its two records) and the CPU tables
    (scripts/machine_table.py's) are marked blocks the generator renders: an edited cell is a difference."""
    page = (ROOT / "docs" / "selectors.md").read_text(encoding="utf-8")
    assert figures._blocks(page, "docs/selectors.md", ROOT) == page
    edited = page.replace("| wiki_topic | `kate` | 1 | 60.3 |", "| wiki_topic | `kate` | 1 | 61.3 |")
    assert edited != page and figures._blocks(edited, "docs/selectors.md", ROOT) == page
    with pytest.raises(SystemExit, match="error: docs/selectors.md: no <!-- selectors-table -->"):
        figures._blocks("no table here", "docs/selectors.md", ROOT)


def test_the_mechanism_table_puts_each_lm_in_its_column_in_size_order_and_stars_by_the_largest():
    """One row per task, pool, k and d; each LM's share in its own column in the bundle's order (by size), the
    controls from any row of that point, and the largest LM over FiD starred only where its p < 0.05."""
    table = load_script("scripts/mechanism_table.py").table

    def row(lm, k, share, gain, p):
        base = {"task": "mr", "labels": "corpus", "k": k, "d": 4, "lm": lm, "reranker": share, "over_first": gain,
                "over_first_p": p}
        for name, v in (("reranker", share), ("first", 0.6), ("random", 0.5), ("oracle", 1.0)):
            base.update({name: v, f"{name}_low": v - 0.01, f"{name}_high": v + 0.01})
        return base

    text = table([row("small", 16, 0.62, 0.02, 0.3), row("big", 16, 0.8, 0.2, 0.001),
                  row("small", 50, 0.61, 0.01, 0.5), row("big", 50, 0.605, 0.005, 0.2)])
    lines = text.splitlines()
    assert lines[0].split(" | ")[6:8] == ["small", "big"] and len(lines) == 4
    assert lines[2].startswith("| mr | labelled (training inputs) | 16 | 4 | 60.0 [59.0, 61.0] | 50.0 [49.0, 51.0] | "
                               "62.0 [61.0, 63.0] | 80.0 [79.0, 81.0] | 100.0 [99.0, 101.0] | +20.0* (big) |")
    assert lines[3].endswith("| +0.5 (big) |")  # the largest's gain, not starred at p=0.2
    with pytest.raises(SystemExit, match="same task, pool, k, d and LM"):
        table([row("big", 16, 0.8, 0.2, 0.001)] * 2)


def test_the_readers_ceiling_gives_each_swap_in_points_with_its_interval_starred_by_its_p():
    """The ceiling table: accuracies in percent, each swap's difference from the reader's own evidence in signed
    points with its 95% interval, starred only where its paired bootstrap p < 0.05."""
    table = load_script("scripts/mechanism_table.py").ceiling_table
    row = {"task": "wiki_topic", "labels": "pseudo", "k": 150, "d": 4, "method": "fid", "seed": 1, "own": 0.791,
           "oracle": 0.85, "anti_oracle": 0.7, "oracle_delta": 0.059, "oracle_ci": [0.04, 0.078], "oracle_p": 0.0001,
           "anti_oracle_delta": -0.091, "anti_oracle_ci": [-0.11, 0.01], "anti_oracle_p": 0.07}
    lines = table([row]).splitlines()
    assert lines[2] == ("| wiki_topic | Wikipedia (pseudo-labels) | 150 | 4 | fid (1) | 79.1 | 85.0 | 70.0 | "
                        "+5.9* [+4.0, +7.8] | -9.1 [-11.0, +1.0] |")


def test_the_dry_runs_the_tutorial_quotes_print_what_their_record_holds(figures):
    """docs/tutorial-table2.md quotes Table 2's dry runs from docs/results/table2_dry_run.json (marked blocks and
    ``dryrun`` spans); run again in the record's clone they print the record's lines, so a change to what they
    print fails here until the record is made again (``--record-dry-run``) and the page rewritten (``--write``)."""
    for asset in ("data/original/mr/test.csv", "data/demo", "models/bert2bert-minilm"):
        demo_asset(asset)
    record = json.loads((ROOT / figures.DRY_RUN).read_text(encoding="utf-8"))
    assert {name: run["command"] for name, run in record["runs"].items()} == figures.DRY_RUNS
    assert record["clone"] == figures.CLONE and record["commit"]
    if not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < figures.DRY_RUN_CORES:
        pytest.skip(f"the dry runs are recorded on {figures.DRY_RUN_CORES} cores")
    now = figures.dry_runs()
    for name, run in record["runs"].items():
        assert run["output"] == now[name], f"{name}: run python scripts/doc_figures.py --record-dry-run, then --write"


def test_a_dry_run_figure_and_block_are_the_records_lines(figures, tmp_path):
    """A ``dryrun`` span is a group of a recorded line; the quoted block is the picked lines and the disk sections."""
    root = _root(tmp_path, [])
    output = ["plan", "wall-clock on 8 worker(s): stages 6.8 min + cells 1 min", "    a cell", "disk, estimated:",
              "  models: 27.04 GB", "    not this", "  total: 1 GB", "Resolution:", "  mr: skipped"]
    (root / figures.DRY_RUN).write_text(json.dumps({"runs": {"experiment": {"output": output}}}))
    assert figures.render("dryrun run=experiment match=stages~([0-9.]+~min)", root) == "6.8 min"
    with pytest.raises(figures.FigureError, match="no line of"):
        figures.render("dryrun run=experiment match=cells~([0-9.]+~h)", root)
    assert figures._dry_run_block(root, "experiment", ("wall-clock on",)) == "\n".join([
        "```text", output[1], output[3], output[4], output[6], "```"])


def test_an_expr_figure_is_worked_out_from_record_values(figures, tmp_path):
    """bench/README's 100M and 1B rows are arithmetic over measured figures: ``expr`` names them by file and path."""
    root = _root(tmp_path, {"rate": 44883.0, "rows": [{"size": 10, "s": 734.0}]})
    spec = "expr value=1e8/(r*8)/60 r=docs/results/r.json:rate fmt={:.1f}"
    assert figures.render(spec, root) == f"{1e8 / (44883.0 * 8) / 60:.1f}"
    assert figures.render("expr value=-s*10**1.13/3600 s=docs/results/r.json:rows.size=10.s fmt={:.2f}", root) == \
        f"{-734.0 * 10 ** 1.13 / 3600:.2f}"
    for bad, says in (("__import__('os')", "only numbers"), ("x+1", "only numbers"), ("1+", "not arithmetic")):
        with pytest.raises(figures.FigureError, match=says):
            figures.render(f"expr value={bad}", root)
    with pytest.raises(figures.FigureError, match="not FILE:PATH"):
        figures.render("expr value=r r=docs/results/r.json", root)


def test_an_expr_name_can_be_a_value_of_the_table2_plan(figures):
    """docs/beyond-one-machine.md's ``keep_resume_state`` arithmetic multiplies the Table 2 plan's cells by a record's
    parameter count: ``table2:PATH`` names a value of the plan (one cell per GPU)."""
    plan = figures._table2_plan(1)
    assert figures.render("expr value=2*c c=table2:cells fmt={:.0f}") == f"{2 * plan['cells']:.0f}"
    assert figures.render("expr value=k/1e9 k=table2:disk.cells fmt={:.3f}") == f"{plan['disk']['cells'] / 1e9:.3f}"
    with pytest.raises(figures.FigureError, match="no 'nothing'"):
        figures.render("expr value=c c=table2:nothing")


def test_a_table2_path_reaches_a_cells_estimate_and_match_a_part_of_its_breakdown(figures):
    """bench/README's breakdown of MR's PGRA cell is the planner's ``Estimate.source``, and the eager figures the
    planner's price of the config with bench/plan_table2.py's EAGER reader: rendered, not typed."""
    module = load_script("bench/plan_table2.py")
    cell = next(e for e in module.plan(8)["estimates"] if e.label == "mr/pgra/seed-1")
    eager = next(e for e in module.plan(8, overrides=module.EAGER)["estimates"] if e.label == "mr/pgra/seed-1")
    path = "path=estimates.label=mr/pgra/seed-1"
    assert figures.render(f"table2 {path}.seconds fmt={{:.0f}}") == f"{cell.seconds:.0f}"
    assert figures.render(f"table2 eager=1 {path}.seconds fmt={{:.0f}}") == f"{eager.seconds:.0f}" != \
        f"{cell.seconds:.0f}"
    assert f"warm-up {figures.render(f'table2 {path}.source match=warm-up~([0-9.]+~[a-z]+)')};" in cell.source
    with pytest.raises(figures.FigureError, match="no group of"):
        figures.render(f"table2 {path}.source match=never~([0-9]+)")


def test_a_size_figure_is_the_bytes_of_a_committed_folder(figures, tmp_path):
    """docs/experiments.md's bundle sizes are their folders' bytes, not typed."""
    root = _root(tmp_path, [])
    (root / "docs" / "results" / "b" / "sub").mkdir(parents=True)
    (root / "docs" / "results" / "b" / "sub" / "x.json").write_bytes(b"x" * 1_500_000)
    (root / "docs" / "results" / "b" / "y.md").write_bytes(b"y" * 400_000)
    assert figures.render("size folder=docs/results/b scale=1e-6 fmt={:.1f}_MB", root) == "1.9 MB"
    with pytest.raises(figures.FigureError, match="no folder docs/results/none"):
        figures.render("size folder=docs/results/none", root)
