"""A results bundle is untrusted input (issue 67): everything in it, its manifest and checksums included, is its
sender's. A bundle built to attack (links, traversal, markup, malformed JSON, forged checksums) is refused with one
error line or rendered inert, and nothing outside ``--out`` changes."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

import pytest

from pgra.cli import main
from pgra.evaluation.bundle import write_bundle
from tests.conftest import one_error_line
from tests.test_bundle_merge import _cells

SECRET = b"TOKEN-1234 not for sharing"


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def forge(bundle: Path, rel: str, data: str | bytes) -> Path:
    """Write ``data`` as the bundle's file ``rel`` and forge its manifest record to match (the sender's checksums)."""
    path = bundle / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"][rel] = {"size": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return path


@pytest.fixture()
def exp(tmp_path) -> Path:
    """An experiment folder: sst2 x fid, pgra x 3 seeds, its candidates' key, manifest and cost record."""
    root = tmp_path / "exp"
    _cells(root, "sst2")
    (root / "sst2" / "candidates" / "cost.json").write_text(json.dumps({"stage_key": "cand-sst2", "elapsed_s": 3.0,
                                                                        "work": []}))
    return root


@pytest.fixture()
def bundle(exp, tmp_path) -> Path:
    write_bundle(exp, tmp_path / "bundle")
    return tmp_path / "bundle"


def test_a_linked_analysis_folder_is_refused_and_nothing_outside_changes(bundle, tmp_path, capsys):
    """H1: ``analysis/`` as a link (to another experiment's analyses, or to any empty folder) is refused before
    anything is written: ``--analyses`` would replace the files there and delete its figures."""
    theirs = tmp_path / "myexp" / "analysis"
    theirs.mkdir(parents=True)
    (theirs / "analysis.json").write_text(json.dumps({"figures": [{"file": "fig.png"}]}))
    (theirs / "analysis.md").write_text("# my analyses\n")
    (theirs / "figures.json").write_text(json.dumps({"figures": [], "pages": []}))
    (theirs / "fig.png").write_bytes(b"\x89PNG mine")
    before = _files(tmp_path / "myexp")
    (bundle / "analysis").symlink_to("../myexp/analysis")
    for args in (["--analyses", "differences"], []):
        line = one_error_line(["report", str(bundle), *args, "--bootstrap", "20"], capsys)
        assert f"{bundle / 'analysis'}: a symbolic link in a bundle" in line
        assert _files(tmp_path / "myexp") == before and not (bundle / "results.md").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    (bundle / "analysis").unlink()
    (bundle / "analysis").symlink_to(empty)
    assert "symbolic link" in one_error_line(["report", str(bundle), "--analyses", "differences"], capsys)
    assert not any(empty.iterdir())


def test_a_figure_index_names_only_the_analyses_own_files(bundle, exp, tmp_path, capsys):
    """H2: a figure named by an absolute path or ``../`` is refused (its bytes would be embedded in results.html);
    a figure that is a link is never embedded, nor a data folder a cell records outside the report's sources."""
    secret = tmp_path / "secret.png"
    secret.write_bytes(SECRET)
    (bundle / "analysis").mkdir()
    for i, name in enumerate((str(secret), "../../secret.png", "sub/x.png", "analysis.json")):
        (bundle / "analysis" / "figures.json").write_text(json.dumps(
            {"figures": [{"file": "ok.png", "title": "t", "caption": "c"}] * i
             + [{"file": name, "title": "t", "caption": "c"}]}))
        line = one_error_line(["report", str(bundle), "--bootstrap", "20"], capsys)
        assert f"figures.json (field 'figures[{i}].file')" in line and "not a .png file beside figures.json" in line
        assert not (bundle / "results.html").exists() and not (bundle / "results.md").exists()
    # an experiment folder (no manifest: nothing is checked against one): a linked figure is not read
    (exp / "analysis").mkdir()
    (exp / "analysis" / "fig.png").symlink_to(secret)
    (exp / "analysis" / "figures.json").write_text(json.dumps(
        {"figures": [{"file": "fig.png", "title": "t", "caption": "c"}], "pages": []}))
    # ... nor the data a cell says it read from a folder of this machine outside the report's sources
    private = tmp_path / "private"
    private.mkdir()
    cell = exp / "sst2" / "fid" / "seed-1" / "cell.json"
    cell.write_text(json.dumps({**json.loads(cell.read_text()), "data": {"folder": str(private)}}))
    preds = exp / "sst2" / "fid" / "seed-1" / "predictions_test.jsonl"
    lines = [json.loads(x) for x in preds.read_text().splitlines()]
    preds.write_text("".join(json.dumps({**x, "evidence": ["c1"]}) + "\n" for x in lines))
    (private / "test.jsonl").write_text("".join(json.dumps(
        {"id": x["id"], "text": x["text"], "label": x["label"], "ctxs": [
            {"id": "c1", "text": SECRET.decode(), "score": 1.0}]}) + "\n" for x in lines))
    assert main(["report", str(exp), "--out", str(tmp_path / "report"), "--bootstrap", "20"]) == 0
    page = (tmp_path / "report" / "results.html").read_text()
    assert base64.b64encode(SECRET).decode() not in page and SECRET.decode() not in page
    assert "analysis/fig.png" not in (tmp_path / "report" / "results.md").read_text()


FIGURE_INDEXES = [
    ("[1]", "figures.json: holds a JSON list, not an object"),
    ('{"figures": 3}', "(field 'figures'): must be a list"),
    ('{"figures": [3]}', "(field 'figures[0]'): must be an object"),
    ('{"figures": [{"file": 3, "title": "t", "caption": "c"}]}', "(field 'figures[0].file'): must be a string"),
    ('{"pages": [{"x": 1}]}', "(field 'pages[0].file'): must be a string"),
    ('{"figures": [{"file": "a.png"}]}', "(field 'figures[0].title'): must be a string"),
]


@pytest.mark.parametrize(("text", "expected"), FIGURE_INDEXES, ids=[t for t, _ in FIGURE_INDEXES])
def test_a_figure_index_of_another_shape_is_one_error_line(bundle, text, expected, capsys):
    """H6: figures.json of the wrong shape was a traceback (AttributeError, KeyError, TypeError)."""
    (bundle / "analysis").mkdir()
    (bundle / "analysis" / "a.png").write_bytes(b"\x89PNG")
    (bundle / "analysis" / "figures.json").write_text(text)
    assert expected in one_error_line(["report", str(bundle), "--bootstrap", "20"], capsys)
    assert not (bundle / "results.md").exists()


def test_a_deep_or_long_manifest_is_one_error_line(bundle, capsys):
    """H6: ``artifacts.read_json`` (every manifest, cell and record) reads as ``parse_json`` does: nesting too deep
    for the parser and a 5,000-digit number are one line, not a RecursionError or a ValueError."""
    from pgra.core.errors import IncompleteArtifactError
    from pgra.storage.artifacts import read_json

    manifest = bundle / "manifest.json"
    record = manifest.read_text()
    manifest.write_text("[" * 100_000 + "]" * 100_000)
    assert "manifest.json: corrupted JSON (nested too deeply)" in one_error_line(["report", str(bundle)], capsys)
    manifest.write_text(record[:-2] + ', "x": ' + "9" * 5000 + "}")
    assert "manifest.json: corrupted JSON (Exceeds the limit" in one_error_line(["report", str(bundle)], capsys)
    with pytest.raises(IncompleteArtifactError, match="corrupted JSON"):
        read_json(manifest)


PREDICTION_FIELDS = [
    ("scores", [1, 2], "field 'scores'"),
    ("scores", {"0": "high"}, "field 'scores'"),
    ("scores", {"0": 10**400}, "field 'scores'"),
    ("evidence", [{"id": 1}], "field 'evidence'"),
    ("evidence", "c1", "field 'evidence'"),
    ("demo_labels", 3, "field 'demo_labels'"),
    ("text", ["a"], "field 'text'"),
    ("id", {"a": 1}, "field 'id'"),
]


@pytest.mark.parametrize(("field", "value", "expected"), PREDICTION_FIELDS,
                         ids=[f"{f}={v!r}"[:40] for f, v, _ in PREDICTION_FIELDS])
def test_a_prediction_field_of_another_type_is_one_error_line(exp, field, value, expected, capsys):
    """H6: prediction scores (evidence, demonstration labels ...) of the wrong type were a traceback in the page."""
    path = exp / "sst2" / "fid" / "seed-1" / "predictions_test.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[0][field] = value
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    line = one_error_line(["report", str(exp), "--bootstrap", "20"], capsys)
    assert f"predictions_test.jsonl:1 ({expected})" in line and not (exp / "results.md").exists()


COST_RECORDS = [
    ("sst2/candidates/cost.json", "[1]", "cost.json: must be an object"),
    ("sst2/candidates/cost.json", '{"stage_key": "cand-sst2", "work": []}', "cost.json (field 'elapsed_s')"),
    ("sst2/candidates/cost.json", '{"stage_key": "cand-sst2", "elapsed_s": 1, "work": [3]}',
     "cost.json (field 'work[0]')"),
    ("sst2/candidates/.stage_key", b"\xff\xfe", ".stage_key:1: undecodable bytes"),
]


@pytest.mark.parametrize(("rel", "data", "expected"), COST_RECORDS, ids=[f"{r}={d!r}"[:50] for r, d, _ in COST_RECORDS])
def test_a_stage_record_of_another_shape_is_one_error_line(bundle, tmp_path, rel, data, expected, capsys):
    """H6: a bundle's stage records (its checksums forged to match) are read for their types before use."""
    forge(bundle, rel, data)
    line = one_error_line(["report", str(bundle), "--out", str(tmp_path / "o"), "--analyses", "cost"], capsys)
    assert expected in line and not (tmp_path / "o" / "results.md").exists()


def test_a_newer_bundle_format_is_refused_by_name(bundle, capsys):
    """H13: the manifest's ``format`` is checked: a newer one needs a newer pgra; one of another type is refused."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    for value, expected in ((2, "the bundle is of format 2, written by a newer pgra; this pgra reads bundles of "
                                "format 1 and older: upgrade pgra"), ("1", "(field 'format'): must be a whole number"),
                            (None, "(field 'format')")):
        (bundle / "manifest.json").write_text(json.dumps({**manifest, "format": value}))
        assert expected in one_error_line(["report", str(bundle)], capsys)
    assert not (bundle / "results.md").exists()


def test_files_added_to_a_bundle_by_hand_are_refused(bundle, capsys):
    """H14: a stage folder (or any file in a task's folder) the manifest does not list is not read as bundled."""
    (bundle / "sst2" / "reranked").mkdir()
    (bundle / "sst2" / "reranked" / ".stage_key").write_text("forged\n")
    line = one_error_line(["report", str(bundle)], capsys)
    assert "holds sst2/reranked/.stage_key, which its manifest does not list" in line
    (bundle / "sst2" / "reranked" / ".stage_key").unlink()
    (bundle / "sst2" / "candidates" / "notes.txt").write_text("mine")
    assert "sst2/candidates/notes.txt" in one_error_line(["report", str(bundle)], capsys)


def list_a_link(bundle: Path, secret: Path) -> tuple[Path, dict]:
    """Replace the bundle's candidates cost.json by a link to ``secret`` (a file of this machine), listed in the
    manifest with the target's own size and SHA-256 (forged checksums); the link and the manifest."""
    secret.write_text(json.dumps({"stage_key": "cand-sst2", "elapsed_s": 1.0, "work": []}))
    cost = bundle / "sst2" / "candidates" / "cost.json"
    cost.unlink()
    cost.symlink_to(secret)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"]["sst2/candidates/cost.json"] = {"size": secret.stat().st_size,
                                                      "sha256": hashlib.sha256(secret.read_bytes()).hexdigest()}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return cost, manifest


def test_a_listed_file_that_is_a_link_is_refused_whatever_its_checksum(bundle, tmp_path, capsys):
    """Forged checksums: a manifest may list a link to a file of this machine with that file's size and SHA-256;
    no link is followed out of a bundle, and a FIFO (which would hang its reader) is refused alike."""
    cost, manifest = list_a_link(bundle, tmp_path / "secret.json")
    line = one_error_line(["report", str(bundle), "--out", str(tmp_path / "o"), "--analyses", "cost"], capsys)
    assert f"{cost}: a symbolic link in a bundle" in line
    cost.unlink()
    os.mkfifo(cost)
    manifest["files"]["sst2/candidates/cost.json"] = {"size": 0, "sha256": hashlib.sha256(b"").hexdigest()}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    assert f"{cost}: a FIFO (named pipe) in a bundle" in one_error_line(["report", str(bundle)], capsys)


def test_bundling_never_copies_what_a_link_points_to(exp, tmp_path, capsys):
    """H5: a stage file (or a cell's) that is a link is refused, naming it: its target (a token linked as
    ``cost.json``) would be shared as the experiment's file."""
    token = tmp_path / "token"
    token.write_bytes(SECRET)
    cost = exp / "sst2" / "candidates" / "cost.json"
    cost.unlink()
    cost.symlink_to(token)
    line = one_error_line(["bundle", str(exp), "--out", str(tmp_path / "b")], capsys)
    assert f"{cost}: is a symbolic link, not a file the experiment wrote" in line and not (tmp_path / "b").exists()
    cost.unlink()
    cost.write_text("{}")
    preds = exp / "sst2" / "pgra" / "seed-2" / "predictions_dev.jsonl"
    preds.rename(tmp_path / "dev.jsonl")
    preds.symlink_to(tmp_path / "dev.jsonl")
    assert str(preds) in one_error_line(["bundle", str(exp), "--out", str(tmp_path / "b")], capsys)


def test_a_bundle_folder_given_as_a_link_is_refused_by_name(exp, tmp_path, capsys):
    """H12: ``--out`` as a link was "Cannot call rmtree on a symbolic link (check the path and the disk...)"."""
    write_bundle(exp, tmp_path / "real")
    before = _files(tmp_path / "real")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    line = one_error_line(["bundle", str(exp), "--out", str(tmp_path / "link")], capsys)
    assert "link is a symbolic link (to " in line and "give the folder itself" in line and "rmtree" not in line
    assert _files(tmp_path / "real") == before and (tmp_path / "link").is_symlink()


IMG = '<img src=x onerror="alert(1)">'


def test_markdown_cells_render_data_as_text():
    """H7: a table cell escapes HTML, code spans, links and images (``md_cell`` escaped ``|`` and line breaks
    only); rendered, no tag, link or image comes from the data."""
    from markdown_it import MarkdownIt

    from pgra.core.markdown import md_cell, md_fence, md_row, md_table

    hostile = [IMG, "[x](javascript:alert(1))", "![i](http://t/p.png)", "<http://t>", "`a|b`", "\\](x)", "a & b"]
    html = MarkdownIt("commonmark").enable("table").render("\n".join(md_table(["label"], ([h] for h in hostile))))
    assert "<img" not in html and "<a " not in html and "<code>" not in html and html.count("<tr>") == 8
    assert md_cell("[lo, hi] (n=3)") == "[lo, hi] (n=3)" and md_row(["knn_vote", "70.0 ± 1.0"]) == \
        "| knn_vote | 70.0 ± 1.0 |"  # pgra's own cells keep their bytes
    fenced = md_fence("a: 'x\n  ```\n  <script>'", "yaml")
    assert fenced[0] == "````yaml" and fenced[-1] == "````"
    assert "<script>" not in MarkdownIt("commonmark").render("\n".join(fenced)).replace("&lt;script&gt;", "")


def test_markup_from_a_bundle_is_inert_in_results_md(bundle, capsys):
    """H7: figure titles and captions land in results.md as text (no heading, no script); a label with markup in
    the demonstrations table is text."""
    from markdown_it import MarkdownIt

    from pgra.evaluation.report import build_report, format_markdown

    (bundle / "analysis").mkdir()
    (bundle / "analysis" / "a.png").write_bytes(b"\x89PNG")
    (bundle / "analysis" / "figures.json").write_text(json.dumps({"figures": [
        {"file": "a.png", "title": "t\n## Owned<script>alert(1)</script>", "caption": "[c](javascript:x) " + IMG}]}))
    assert main(["report", str(bundle), "--bootstrap", "20"]) == 0
    md = (bundle / "results.md").read_text()
    assert "- [t ## Owned&lt;script&gt;alert(1)&lt;/script&gt;](analysis/a.png): \\[c\\](javascript:x) &lt;img" in md
    html = MarkdownIt("commonmark").render(md)
    assert "<script" not in html and "<img" not in html and "javascript:" not in html.replace("](javascript:", "")
    assert "<h2>Owned" not in html and 'href="javascript' not in html
    report = build_report(bundle, n_resamples=20)
    report["diagnostics"] = {"pgra": {"sst2": {"seeds": 1, "demonstrations": {
        "demos_per_input": 2.0, "label_histogram": {IMG: 0.5, "1": 0.5}, "majority_agreement": 0.5,
        "gold_in_demos": 0.5}}}}
    md = format_markdown(report)
    assert "<img" not in md and "&lt;img src=x onerror=\"alert(1)\"&gt; 50%" in md


def test_a_task_or_method_name_with_markup_is_refused_before_anything_is_written(exp, capsys):
    """H7: a cell's task or method is a folder's name: one with markup is refused when the cell is read, before
    results.json and results.md are written (the page refused it after them)."""
    cell = exp / "sst2" / "pgra" / "seed-1" / "cell.json"
    record = json.loads(cell.read_text())
    for field, value in (("method", "<b>pgra</b>"), ("task", "sst2 <img>"), ("method", "a/b")):
        cell.write_text(json.dumps({**record, field: value}))
        line = one_error_line(["report", str(exp), "--bootstrap", "20"], capsys)
        assert f"cell.json (field '{field}'): must be a {field} name" in line
        assert not (exp / "results.json").exists() and not (exp / "results.md").exists()


def test_the_model_card_shows_labels_and_settings_as_text(tmp_path):
    """H7: the card ``--push-to-hub`` publishes: labels with markup are text in its table, and a setting holding a
    code fence stays inside the settings' block."""
    from pgra.serving.export import model_card

    (tmp_path / "metrics.json").write_text(json.dumps({"metric": "accuracy", "test": {"accuracy": 0.5}}))
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "reader", "config": {"seed": 1}}))
    spec = {"pgra": "0.1", "index": None, "reranked": None, "n_passages": 3, "k": 8, "candidates": {}}
    task = {"name": "sky", "labels": [IMG, "town"], "reader_words": {IMG: "a|b", "town": "city"}}
    card = model_card(tmp_path, spec, {"task": task, "model": "t5",
                                       "config": {"seed": 1, "note": "x\n```\n<script>alert(1)</script>"}})
    assert "<img" not in card and "| &lt;img src=x onerror=\"alert(1)\"&gt; | a\\|b |" in card
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").enable("table").render(card.split("\n---\n", 1)[1])
    assert "<script>" not in html and "<img" not in html


def test_a_bundle_record_or_manifest_of_another_shape_is_one_error_line(bundle, tmp_path, capsys):
    """H6: the bundle's ownership record and manifest are read for their types before use (a list of files where
    pgra writes an object, a number where it writes the files' records were a TypeError)."""
    assert main(["report", str(bundle), "--bootstrap", "20"]) == 0
    record = json.loads((bundle / ".pgra-owned.json").read_text())
    (bundle / ".pgra-owned.json").write_text(json.dumps({**record, "files": ["results.json", "results.md"]}))
    assert "results.json was not written by pgra" in one_error_line(["report", str(bundle)], capsys)
    (bundle / ".pgra-owned.json").write_text(json.dumps(record))
    manifest = json.loads((bundle / "manifest.json").read_text())
    (bundle / "manifest.json").write_text(json.dumps({**manifest, "files": 5}))
    line = one_error_line(["report", str(bundle), "--analyses", "calibration"], capsys)
    assert "manifest.json (field 'files'): lists no files" in line


def test_results_analyses_never_write_through_a_linked_analysis_folder(exp, tmp_path, capsys):
    """H1, in a report's own folder: its ``analysis/`` as a link is refused (the ownership check followed it)."""
    out, elsewhere = tmp_path / "report", tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert main(["report", str(exp), "--out", str(out), "--bootstrap", "20"]) == 0
    (out / "analysis").symlink_to(elsewhere)
    line = one_error_line(["report", str(exp), "--out", str(out), "--analyses", "calibration"], capsys)
    assert f"{out / 'analysis'} is a symbolic link" in line and not any(elsewhere.iterdir())


CELL_FIELDS = [("config", [1]), ("cost", [1]), ("cost", {"work": [], "hardware": 3}), ("lm_cost", [1]),
               ("lm_cost", {"lm_calls": "x", "lm_tokens": 1}), ("elapsed_s", "x"), ("data", "x"), ("versions", [1])]


@pytest.mark.parametrize(("field", "value"), CELL_FIELDS, ids=[f"{f}={v!r}" for f, v in CELL_FIELDS])
def test_a_bundled_cell_field_of_another_type_is_one_error_line(bundle, exp, tmp_path, field, value, capsys):
    """H6: the fields of a cell.json the report, the merge and the analyses read (its config, cost, LM cost, data
    and versions records) are checked for type when it is read (a list config was an AttributeError in the report's
    environment section, a list lm_cost a TypeError in its diagnostics)."""
    rel = "sst2/fid/seed-1/cell.json"
    forge(bundle, rel, json.dumps({**json.loads((bundle / rel).read_text()), field: value}))
    for args in (["report", str(bundle)], ["report", str(bundle), str(exp), "--out", str(tmp_path / "m")],
                 ["report", str(bundle), "--out", str(tmp_path / "o"), "--analyses", "cost"]):
        line = one_error_line([*args, "--bootstrap", "20"], capsys)
        assert f"{bundle / rel} (field '{field}')" in line, line
    assert not (bundle / "results.md").exists() and not (tmp_path / "m").exists() and not (tmp_path / "o").exists()


def test_a_split_name_never_leads_a_read_out_of_the_cell(bundle, tmp_path, capsys):
    """A bundled cell's split names its predictions file (``predictions_<split>.jsonl``): one with ``/`` and ``..``
    (through an empty folder the bundle holds) read a file of this machine as the cell's; it is refused when the
    cell is read, as it was when the experiment was bundled."""
    victim = tmp_path / "victim"
    victim.mkdir()
    rel = "sst2/fid/seed-1/cell.json"
    (victim / "predictions_test.jsonl").write_bytes((bundle / "sst2/fid/seed-1/predictions_dev.jsonl").read_bytes())
    (bundle / "sst2/fid/seed-1/predictions_a").mkdir()
    record = json.loads((bundle / rel).read_text())
    split = "a/../../../../../victim/predictions_test"
    record["results"][split] = record["results"]["dev"]
    forge(bundle, rel, json.dumps(record))
    line = one_error_line(["report", str(bundle), "--bootstrap", "20"], capsys)
    assert f"{bundle / rel} (field 'results'): holds a split '{split}'" in line
    assert not (bundle / "results.json").exists()


def test_the_cost_analysis_shows_a_bundles_hardware_as_text(bundle, tmp_path):
    """H7: the hardware a bundled cell's cost record names lands in analysis.md as text, not as a tag."""
    rel = "sst2/fid/seed-1/cell.json"
    record = json.loads((bundle / rel).read_text())
    forge(bundle, rel, json.dumps({**record, "cost": {"work": [], "hardware": {"device": IMG}}}))
    assert main(["report", str(bundle), "--out", str(tmp_path / "o"), "--analyses", "cost", "--bootstrap", "20"]) == 0
    md = (tmp_path / "o" / "analysis" / "analysis.md").read_text()
    assert "&lt;img src=x onerror=" in md and "<img" not in md


def test_a_cells_lone_angle_bracket_keeps_its_bytes_and_a_tag_never_does():
    """pgra's own ``p<0.001`` (the laptop table in README.md) stays as it is: a ``<`` with no ``>`` after it opens
    no tag, comment or autolink; with one after it, both are entities (an email autolink starts with a digit too)."""
    from markdown_it import MarkdownIt

    from pgra.core.markdown import md_cell

    assert md_cell("-6.0 (p<0.001, Holm 0.004)*") == "-6.0 (p<0.001, Holm 0.004)*"
    for value in ("<0@evil.example>", "a <b\n>", "x<y>z", "<!-- c -->"):
        cell = md_cell(value)
        assert "<" not in cell.replace("<br>", "") and ">" not in cell.replace("<br>", ""), cell
    html = MarkdownIt("commonmark").enable("table").render("| a |\n|---|\n| " + md_cell("<0@evil.example>") + " |\n")
    assert "mailto" not in html and "<a " not in html


def test_a_seed_folder_named_by_hand_is_no_seed_any_filter_takes():
    """``seed-²`` (a digit ``str.isdigit`` takes and ``int`` refuses) is a folder made by hand: seed -1, taken by no
    filter of seeds, and never a traceback (issue 67, H11)."""
    from pgra.evaluation.bundle import _seed

    assert [_seed(s) for s in ("seed-1", "seed-12", "seed-²", "seed-", "seed-1.5", "other")] == [1, 12, -1, -1, -1, -1]
