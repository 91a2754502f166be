"""docs/rerankers.md's *Measured on the demo's MR* table is rendered from its records (issue 71): the bundle's
``analysis.json`` and bench/rerankers_bootstrap.py's ``--json`` record, each column from the right field."""

from __future__ import annotations

import json

import pytest

from tests.conftest import load_script


def _analysis_row(reranker, source, share, overlap, d=2):
    return {"task": "mr", "source": source, "lm": None, "d": d, "share": share, "consistent": round(400 * share),
            "evidence": 400, "inputs": 200, "reranker": reranker, "overlap": overlap, "promoted": 1 - overlap}


def _interval_row(reranker, share, low, high, vs, vs_low, vs_high, rank):
    return {"stage": reranker, "reranker": reranker, "share": share, "share_low": low, "share_high": high,
            "vs_first": vs, "vs_first_low": vs_low, "vs_first_high": vs_high, "mean_rank_kept": rank}


def _records(root, analysis_rows, interval_rows):
    table = load_script("scripts/rerankers_table.py")
    folder = root / table.BUNDLE / "analysis"
    folder.mkdir(parents=True)
    other = {"task": "mr", "source": "PGRA (x)", "lm": "x", "d": 2, "share": 0.9}  # the consistency table's: not read
    (folder / "analysis.json").write_text(json.dumps({"tables": {"consistency": [other], "rerankers": analysis_rows}}))
    (root / table.INTERVALS).write_text(json.dumps({"rows": interval_rows}))
    return table


def test_each_column_of_the_rerankers_table_comes_from_its_field(tmp_path):
    """Share, overlap and promoted from the analysis, the interval, the difference and the mean rank from the
    bootstrap; rows in the analysis's order (the bootstrap's is the folders')."""
    table = _records(tmp_path,
                     [_analysis_row("first stage", "first stage (FiD)", 0.5625, 1.0),
                      _analysis_row("mmr", "MMR", 0.5725, 0.627)],
                     [_interval_row("mmr", 0.5725, 0.517, 0.625, 0.01, -0.03, 0.05, 2.06),
                      _interval_row("first stage", 0.5625, 0.505, 0.618, 0.0, 0.0, 0.0, 1.5)])
    lines = table.render(tmp_path).splitlines()
    assert lines[0] == ("| reranker | label consistency (%) | 95% interval | vs first stage (points, 95% interval) | "
                        "overlap with first stage (%) | promoted (%) | mean first-stage rank kept |")
    assert lines[2:] == ["| first stage: FiD's top 2 | 56.2 | 50.5–61.8 | — | 100.0 | 0.0 | 1.50 |",
                         "| `mmr`: MMR | 57.2 | 51.7–62.5 | +1.0 (-3.0 to +5.0) | 62.7 | 37.3 | 2.06 |"]


def test_a_bootstrap_record_of_another_run_is_refused(tmp_path):
    """A consistency the analysis does not give, or another set of rerankers, is an error line, not a table."""
    table = _records(tmp_path, [_analysis_row("random", "random", 0.55, 0.49)],
                     [_interval_row("random", 0.56, 0.5, 0.6, 0.0, 0.0, 0.0, 2.5)])
    with pytest.raises(SystemExit, match="error: .*random's label consistency 56.0 is not the analysis's 55.0"):
        table.render(tmp_path)
    with pytest.raises(SystemExit, match=r"error: .*its rerankers \['mmr'\] are not the analysis's \['random'\]"):
        table.table([_analysis_row("random", "random", 0.55, 0.49)],
                    [_interval_row("mmr", 0.55, 0.5, 0.6, 0.0, 0.0, 0.0, 2.5)])


def test_the_bootstrap_record_holds_each_stages_share_difference_and_ranks(tmp_path):
    """bench/rerankers_bootstrap.py --json on a tiny experiment: the shares and the paired difference as fractions,
    the reranker each folder holds, the mean first-stage rank and the count of each rank kept."""
    bootstrap = load_script("bench/rerankers_bootstrap.py")
    (tmp_path / "analysis" / "mr").mkdir(parents=True)
    labels = {"a": "pos", "b": "neg", "c": "pos", "e": "neg"}
    (tmp_path / "analysis" / "mr" / "pseudo_labels.json").write_text(json.dumps({"labels": labels}))

    def write(stage, records):
        (tmp_path / "mr" / stage).mkdir(parents=True)
        (tmp_path / "mr" / stage / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    def ctx(*pairs):
        return [{"id": i, "retrieval_rank": rank} for i, rank in pairs]

    write("candidates", [{"id": 1, "label": "pos", "ctxs": ctx(("a", 1), ("b", 2), ("c", 3))},
                         {"id": 2, "label": "neg", "ctxs": ctx(("a", 1), ("c", 2), ("e", 3))}])
    write("reranked-mmr", [{"id": 1, "label": "pos", "ctxs": ctx(("a", 1), ("c", 3))},
                           {"id": 2, "label": "neg", "ctxs": ctx(("e", 3), ("a", 1))}])
    write("reranked", [{"id": 1, "label": "pos", "ctxs": ctx(("b", 2), ("a", 1))},
                       {"id": 2, "label": "neg", "ctxs": ctx(("c", 2), ("a", 1))}])
    out = tmp_path / "intervals.json"
    bootstrap.main([str(tmp_path), "--task", "mr", "--d", "2", "--resamples", "50", "--json", str(out)])
    rows = {r["stage"]: r for r in json.loads(out.read_text())["rows"]}
    assert [(s, r["reranker"]) for s, r in rows.items()] == [
        ("first stage", "first stage"), ("reranked", "prompt_guided"), ("reranked-mmr", "mmr")]
    assert [rows[s]["share"] for s in rows] == [0.25, 0.25, 0.75]
    assert rows["reranked-mmr"]["vs_first"] == 0.5 and rows["reranked"]["vs_first"] == 0.0
    assert rows["reranked-mmr"]["share_low"] <= 0.75 <= rows["reranked-mmr"]["share_high"]
    assert rows["reranked-mmr"]["mean_rank_kept"] == 2.0 and rows["reranked-mmr"]["ranks_kept"] == {"1": 2, "3": 2}
    assert rows["first stage"]["ranks_kept"] == {"1": 2, "2": 2} and rows["first stage"]["pairs"] == 4
    assert rows["reranked-mmr"]["shared_with"] == {"first stage": 0.5, "prompt_guided": 0.5}
    assert rows["reranked"]["shared_with"]["first stage"] == 1.0
