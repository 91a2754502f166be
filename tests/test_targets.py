# numerics: differences of hand-made accuracies from the paper's numbers, in Python floats
"""`pgra report --compare`: the published numbers beside each cell of a hand-made grid."""

from __future__ import annotations

import json

import pytest
import yaml

from pgra.cli import main
from pgra.evaluation.targets import load_targets, paper_targets_path
from tests.conftest import one_error_line
from tests.test_report import runs  # noqa: F401  (the hand-made grid: sst2 and cr x fid, pgra x 3 seeds + knn_vote)

PAPER_TASKS = ["sst2", "sst5", "cola", "trec", "cr", "mr", "mpqa", "subj"]


def test_paper_targets_file_is_table_2():
    """Every row has the paper's eight tasks and its average, which is the mean of the eight as printed (to the
    paper's rounding): a transcription check."""
    targets = load_targets("paper")
    assert targets["file"] == str(paper_targets_path())
    assert set(targets["methods"]) == {"no_retrieval", "fid", "pgra", "knn_vote", "icl_random"}
    for method, per_task in targets["methods"].items():
        assert list(per_task) == [*PAPER_TASKS, "average"], method
        mean = sum(per_task[t]["value"] for t in PAPER_TASKS) / 8
        assert per_task["average"]["value"] == pytest.approx(mean, abs=0.1), method
        assert all(v["tolerance"] is None for v in per_task.values())  # the paper gives no spread
    assert targets["methods"]["pgra"]["mr"]["value"] == 91.1 and targets["methods"]["fid"]["mr"]["value"] == 90.1


def test_report_compares_each_cell_with_the_paper(runs, capsys):  # noqa: F811
    assert main(["report", str(runs), "--bootstrap", "200", "--compare", "paper"]) == 0
    saved = json.loads((runs / "results.json").read_text())
    comp = saved["compare"]
    fid = comp["cells"]["fid"]["sst2"]  # ours 70.0 (hand-made) against the paper's 92.2
    assert fid == {"paper": 92.2, "ours": pytest.approx(70.0), "difference": pytest.approx(-22.2),
                   "tolerance": None, "outside": None}
    assert comp["cells"]["pgra"]["cr"]["difference"] == pytest.approx(60.0 - 91.7)
    assert comp["cells"]["knn_vote"] == {"sst2": {"paper": 59.2, "ours": pytest.approx(40.0),
                                                  "difference": pytest.approx(-19.2), "tolerance": None,
                                                  "outside": None}}
    assert "no_retrieval/sst2" in comp["not_run"] and "fid/average" not in comp["cells"]["fid"]
    md = (runs / "results.md").read_text()
    assert "## Against the published numbers" in md and "| fid | -22.2 (92.2) | -41.3 (91.3) |" in md
    assert "No tolerance" in md and not any("†" in line for line in md.splitlines() if line.startswith("| "))
    assert '"compare"' in (runs / "results.html").read_text()

    # a tolerance marks the cells outside it
    assert main(["report", str(runs), "--bootstrap", "200", "--compare", "paper", "--tolerance", "20"]) == 0
    cells = json.loads((runs / "results.json").read_text())["compare"]["cells"]
    assert cells["fid"]["sst2"]["outside"] is True and cells["knn_vote"]["sst2"]["outside"] is False
    assert "| knn_vote | -19.2 (59.2) | – |" in (runs / "results.md").read_text()


def test_a_hand_made_targets_file_with_per_value_tolerance(runs, tmp_path):  # noqa: F811
    f = tmp_path / "targets.yaml"
    f.write_text(yaml.safe_dump({"source": "my table", "tolerance": 5,
                                 "methods": {"pgra": {"sst2": {"value": 79.0, "tolerance": 0.5}, "cr": 58.0}}}))
    assert main(["report", str(runs), "--bootstrap", "200", "--compare", str(f)]) == 0
    cells = json.loads((runs / "results.json").read_text())["compare"]["cells"]["pgra"]
    assert cells["sst2"]["outside"] is True and cells["cr"]["outside"] is False  # +1.0 > 0.5; +2.0 <= 5
    md = (runs / "results.md").read_text()
    assert "| pgra | +1.0 (79.0) † | +2.0 (58.0) |" in md and "Source: my table." in md
    # each task's verdict: sst2 has a cell outside its tolerance, cr none
    assert json.loads((runs / "results.json").read_text())["compare"]["verdicts"] == {"sst2": False, "cr": True}
    assert "| **reproduced** | ✗ | ✓ |" in md and "## Environment" in md


@pytest.mark.parametrize("content, field", [
    ({"methods": {"fid": {"sst2": "high"}}}, "methods.fid.sst2"),
    ({"methods": {"fid": {"sst2": 120}}}, "methods.fid.sst2"),
    ({"methods": {"fid": {"sst2": {"value": 90, "tol": 1}}}}, "methods.fid.sst2"),
    ({"methods": {"fid": {"sst2": 90}}, "tolerance": -1}, "tolerance"),
    ({"methods": {"fid": [90]}}, "methods.fid"),
    ({"method": {"fid": {"sst2": 90}}}, "method"),
    ({}, "methods"),
])
def test_a_bad_targets_file_is_one_error_line(runs, tmp_path, capsys, content, field):  # noqa: F811
    f = tmp_path / "targets.yaml"
    f.write_text(yaml.safe_dump(content))
    line = one_error_line(["report", str(runs), "--compare", str(f)], capsys)
    assert str(f) in line and f"field '{field}'" in line
    assert not (runs / "results.md").exists()


def test_tolerance_needs_compare(runs, capsys):  # noqa: F811
    assert "--compare" in one_error_line(["report", str(runs), "--tolerance", "1"], capsys)


def test_the_results_page_shows_the_paper_under_each_mean(runs, tmp_path):  # noqa: F811
    from tests.test_page import _chromium, _dump_dom

    if _chromium() is None:
        pytest.skip("Chromium not installed (make chromium)")
    assert main(["report", str(runs), "--bootstrap", "200", "--compare", "paper", "--tolerance", "20"]) == 0
    dom = _dump_dom((runs / "results.html").as_uri(), tmp_path / "profile")
    table = dom.split('id="results-table"', 1)[1].split("</table>", 1)[0]
    assert "paper 92.2 (-22.2) †" in table and "paper 59.2 (-19.2)<" in table.replace("</span>", "<")


# --- issue 53 (reliability round 4) ---

def test_text_from_a_targets_file_reaches_results_md_escaped(runs, tmp_path):  # noqa: F811
    """The file's source (and its name) are text: a pipe, a line break or HTML in them never becomes markup, a
    table row or a heading in results.md."""
    folder = tmp_path / "a|b_<i>"
    folder.mkdir()
    f = folder / "t.yaml"
    source = "Table 2 | row\n## injected heading\n<script>alert(1)</script> & [x](javascript:y)"
    f.write_text(yaml.safe_dump({"source": source, "methods": {"pgra": {"sst2": 79.0}}}))
    assert main(["report", str(runs), "--bootstrap", "200", "--compare", str(f)]) == 0
    md = (runs / "results.md").read_text()
    lines = md.splitlines()
    assert "Source: Table 2 \\| row ## injected heading &lt;script&gt;alert(1)&lt;/script&gt; &amp; " \
           "\\[x\\](javascript:y)." in lines
    assert not any(line.startswith("## injected") for line in lines) and "<script>" not in md and "<i>" not in md
    assert any(line.startswith("## Against the published numbers (") and "a\\|b\\_&lt;i&gt;" in line for line in lines)
    assert json.loads((runs / "results.json").read_text())["compare"]["source"] == source  # the data keeps it


@pytest.mark.parametrize("text, field, line", [
    ("methods:\n  pgra: {sst2: 70}\n  pgra: {sst2: 80}\n", "pgra", 3),
    ("methods:\n  pgra:\n    sst2: 70\n    sst2: 80\n", "sst2", 4),
    ("source: a\nmethods: {pgra: {sst2: 70}}\nsource: b\n", "source", 3),
])
def test_a_key_twice_in_a_targets_file_is_refused(runs, tmp_path, capsys, text, field, line):  # noqa: F811
    f = tmp_path / "targets.yaml"
    f.write_text(text)
    error = one_error_line(["report", str(runs), "--compare", str(f)], capsys)
    assert f"{f}:{line} (field '{field}')" in error and "duplicate key" in error
    assert not (runs / "results.md").exists()


def test_a_source_that_is_not_text_is_refused(tmp_path):
    from pgra.core.errors import InputError

    f = tmp_path / "targets.yaml"
    f.write_text(yaml.safe_dump({"source": {"a": 1}, "methods": {"pgra": {"sst2": 70}}}))
    with pytest.raises(InputError) as e:
        load_targets(f)
    assert e.value.field == "source"
