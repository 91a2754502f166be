"""results.html: the self-contained page of a finished grid (data against the cells' files, escaping, paging the
data into a script beside it) and, where Chromium is installed, what a headless browser shows."""

import html as html_mod
import json
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlencode

import pytest

from pgra.cli.experiment import run_and_report
from pgra.core.config import from_dict
from pgra.core.markdown import md_cell, md_table
from pgra.evaluation import page as page_mod
from pgra.evaluation.report import format_markdown
from pgra.experiment import ExperimentConfig
from tests.conftest import write_corpus, write_sky_task
from tests.test_experiment import _config

MARK = "window.PGRA_DATA = "
#: markup in the data: an image whose error handler marks the page (``data-xss="42"`` on the body) if it ever runs,
#: written to break out of an attribute value too
XSS = "\"'><img src=x onerror=\"document.body.dataset.xss=6*7\">"


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _embedded(html: str) -> str:
    """The JSON the page's data script holds."""
    start = html.index(MARK) + len(MARK)
    return html[start:html.index(";</script>", start)]


def _data(html: str) -> dict:
    return json.loads(_embedded(html))


@pytest.fixture(scope="module")
def finished_grid(tmp_path_factory, tiny_opt, tiny_t5) -> Path:
    """One finished grid (no_retrieval, fid, pgra over 2 seeds; knn_vote) shared by this module's tests."""
    root = tmp_path_factory.mktemp("page-grid")
    cfg = _config(root, write_corpus(root), write_sky_task(root), tiny_opt, tiny_t5,
                  methods=["no_retrieval", "fid", "pgra", "knn_vote"], seeds=[1, 2])
    assert not run_and_report(from_dict(ExperimentConfig, cfg))
    return Path(cfg["out"])


@pytest.fixture()
def grid_dir(finished_grid, tmp_path) -> Path:
    """A copy of the finished grid a test may change (cell paths in results.json stay the original's)."""
    copy = tmp_path / "exp"
    shutil.copytree(finished_grid, copy)
    return copy


def test_page_holds_every_prediction_with_its_evidence(grid_dir, monkeypatch):
    html = (grid_dir / "results.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "http://" not in html and "https://" not in html  # nothing fetched
    data = _data(html)
    assert data["tasks"] == ["sky"] and data["reference"] == "fid"
    report = json.loads((grid_dir / "results.json").read_text())
    assert data["summary"] == report["summary"] and data["significance"] == report["significance"]
    inputs = {x["id"]: x for x in data["inputs"]["sky"]}
    task_dir = grid_dir / "sky"
    texts = data["texts"]["sky"]
    train = {r["id"]: r for r in _lines(task_dir / "candidates" / "train.jsonl")}
    reranked = {r["id"]: r for r in _lines(task_dir / "reranked" / "test.jsonl")}
    candidates = {r["id"]: r for r in _lines(task_dir / "candidates" / "test.jsonl")}
    for method, seeds in (("no_retrieval", [1, 2]), ("fid", [1, 2]), ("pgra", [1, 2]), ("knn_vote", [1])):
        for seed in seeds:
            for line in _lines(task_dir / method / f"seed-{seed}" / "predictions_test.jsonl"):
                shown = {s[0]: s for s in inputs[line["id"]]["p"][method]}[seed]
                assert shown[1] == line["prediction"] and inputs[line["id"]]["label"] == line["label"]
                assert shown[2] == {k: pytest.approx(v, abs=1e-4) for k, v in line["scores"].items()}  # numerics: 4 decimals shown
                evidence = shown[3]
                assert [k.split(":", 1)[1] for k, _, _ in evidence] == [str(e) for e in line["evidence"]]
                for key, score, rank in evidence:
                    eid = key.split(":", 1)[1]
                    if method == "pgra":  # the reranker's probability and the first-stage rank
                        ctx = next(c for c in reranked[line["id"]]["ctxs"] if str(c["id"]) == eid)
                        assert (score, rank) == (pytest.approx(ctx["score"], abs=1e-4), ctx["retrieval_rank"])  # numerics: 4 decimals
                        assert texts[key]["text"] == ctx["text"]
                    elif method == "fid":
                        pos = [str(c["id"]) for c in candidates[line["id"]]["ctxs"]].index(eid)
                        assert rank == pos + 1
                    else:  # the kNN vote's voters: training inputs with their labels
                        assert key.startswith("t:") and texts[key] == {"text": train[eid]["text"],
                                                                       "label": str(train[eid]["label"])}
    assert {c["path"] for c in data["cells"]} == {f"sky/{m}/seed-{s}" for m, ss in
                                                  (("no_retrieval", [1, 2]), ("fid", [1, 2]), ("pgra", [1, 2]),
                                                   ("knn_vote", [1])) for s in ss}
    assert data["provenance"]["commits"] and data["provenance"]["config"]["methods"]
    assert not (grid_dir / page_mod.DATA_SCRIPT).exists()

    # a large grid: the data goes to a script beside the page, which loads it from disk
    monkeypatch.setattr(page_mod, "INLINE_LIMIT", 1000)
    page_mod.write_page(grid_dir, report)
    html = (grid_dir / "results.html").read_text(encoding="utf-8")
    assert MARK not in html and f'<script src="{page_mod.DATA_SCRIPT}"></script>' in html
    script = (grid_dir / page_mod.DATA_SCRIPT).read_text(encoding="utf-8")
    assert script.startswith(MARK) and json.loads(script[len(MARK):].rstrip().rstrip(";"))["tasks"] == ["sky"]


def _rewrite(path: Path, change) -> None:
    """Rewrite the JSON lines file ``path`` with ``change`` applied to each record (in place)."""
    records = _lines(path)
    for r in records:
        change(r)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _plant_inputs(grid: Path, fields: dict[str, dict]) -> None:
    """Set ``fields[id]`` on the input ``id`` in every cell's predictions of the grid's task ``sky``."""
    for preds in (grid / "sky").glob("*/seed-*/predictions_test.jsonl"):
        _rewrite(preds, lambda r: r.update(fields.get(r["id"], {})))


def test_text_that_looks_like_markup_stays_data(grid_dir, monkeypatch):
    """The embedded JSON holds no ``<``, ``>``, ``&`` or line separator (U+2028/9) as such, only as unicode escapes:
    nothing in it can close its script element or open a comment or a script in it; it reads back the same."""
    report = json.loads((grid_dir / "results.json").read_text())
    preds = grid_dir / "sky" / "fid" / "seed-1" / "predictions_test.jsonl"
    lines = _lines(preds)
    planted = ["</script><script>alert(1)</script> {{DATA}} {{TITLE}}", "<!-- <script> a & b > c \u2028 d \u2029 e",
               XSS]
    _plant_inputs(grid_dir, {x["id"]: {"text": text} for x, text in zip(lines, planted, strict=False)})
    page_mod.write_page(grid_dir, report)
    html = (grid_dir / "results.html").read_text(encoding="utf-8")
    assert html.count("</script>") == 2  # the data's and the page script's own
    embedded = _embedded(html)
    assert not set(embedded) & set("<>&\u2028\u2029") and "\\u003c!--" in embedded
    texts = {x["id"]: x["text"] for x in _data(html)["inputs"]["sky"]}
    assert [texts[x["id"]] for x in lines[:3]] == planted
    assert _data(html) == json.loads(json.dumps(page_mod.page_data(grid_dir, report)))  # the same data, read back

    monkeypatch.setattr(page_mod, "INLINE_LIMIT", 1000)  # the script beside the page: the same escapes
    page_mod.write_page(grid_dir, report)
    script = (grid_dir / page_mod.DATA_SCRIPT).read_text(encoding="utf-8")
    body = script[len(MARK):].rstrip().rstrip(";")
    assert script.startswith(MARK) and not set(body) & set("<>&\u2028\u2029")
    assert [{x["id"]: x["text"] for x in json.loads(body)["inputs"]["sky"]}[x["id"]] for x in lines[:3]] == planted


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _dump_dom(url: str, profile: Path, window: str = "") -> str:
    """The DOM headless Chromium holds once ``url`` has loaded and its scripts have run (in a window of ``window``
    pixels, "WIDTH,HEIGHT", when given)."""
    size = [f"--window-size={window}"] if window else []
    proc = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
                           *size, f"--user-data-dir={profile}", "--dump-dom", url], capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _browse_disagreements(page: Path, task: str, profile: Path) -> None:
    """Open ``page`` in headless Chromium filtered to the inputs where the methods disagree, with the first of them
    open, and check what the browser shows against the page's data."""
    data = _data(page.read_text(encoding="utf-8")) if MARK in page.read_text(encoding="utf-8") else None
    if data is None:  # a large grid: the data sits in the script beside the page
        script = (page.parent / page_mod.DATA_SCRIPT).read_text(encoding="utf-8")
        data = json.loads(script[len(MARK):].rstrip().rstrip(";"))
    inputs = data["inputs"][task]
    disagree = [x for x in inputs if len({sorted(x["p"][m])[0][1] for m in x["p"]}) > 1]
    assert disagree, "no input where the methods disagree"
    chosen = disagree[0]
    dom = _dump_dom(page.resolve().as_uri() + f"#task={task}&disagree=1&open={chosen['id']}", profile)
    assert f"{len(disagree)} of {len(inputs)} inputs" in dom  # the filter ran
    assert f'<h3 id="detail-id">{chosen["id"]}</h3>' in dom  # the input opened
    for method, runs in chosen["p"].items():
        assert dom.count(f'data-method="{method}"') == len(runs)  # every method and seed side by side
    table = dom[dom.index('<table id="inputs">'):]
    assert table[:table.index("</table>")].count('<tr class="row') == min(len(disagree), 50)
    assert "results-table" in dom and "diff-table" in dom


@pytest.mark.skipif(_chromium() is None, reason="Chromium not installed (make chromium)")
def test_headless_browser_filters_and_opens_an_input(grid_dir, tmp_path):
    _browse_disagreements(grid_dir / "results.html", "sky", tmp_path / "profile")


def _plant_markup(grid: Path, report: dict) -> str:
    """Put ``XSS`` in every kind of value the page shows: an input's id, text and gold label, a prediction and a
    label of its probabilities, the corpus sentences and their first-stage ranks (``retrieval_rank`` of the data
    folders' ``test.jsonl``), the demonstrations' texts and labels, the task's words for its labels, the figures, and
    the report's numbers, metric name, floor, directory and provenance (``report``, changed in place). Returns
    the input's new id."""
    sky = grid / "sky"
    target = next(x for x in _lines(sky / "pgra" / "seed-1" / "predictions_test.jsonl") if x["evidence"])["id"]
    new_id = target + XSS

    def prediction(r: dict) -> None:
        if r["id"] == target:
            r.update(id=new_id, text=XSS + " the input", label=XSS, scores={**r["scores"], XSS: 0.5})

    def record(r: dict) -> None:  # a data folder's test input with its corpus sentences
        r.update(id=new_id if r["id"] == target else r["id"])
        for c in r.get("ctxs", []):
            c.update(retrieval_rank=XSS, text=XSS + c["text"])

    for preds in sky.glob("*/seed-*/predictions_test.jsonl"):
        _rewrite(preds, prediction)
    _rewrite(sky / "pgra" / "seed-1" / "predictions_test.jsonl",
             lambda r: r.update(prediction=XSS) if r["id"] == new_id else None)
    for path in sky.glob("*/test.jsonl"):
        _rewrite(path, record)
    for path in sky.glob("*/train.jsonl"):  # the demonstrations and voters
        _rewrite(path, lambda r: r.update(text=XSS + r["text"], label=XSS))
    for path in sky.glob("*/seed-*/cell.json"):
        cell = json.loads(path.read_text())
        cell["task_spec"]["demo_words"] = {"sky": XSS, "town": XSS}
        path.write_text(json.dumps(cell))
    (grid / "analysis").mkdir(exist_ok=True)
    (grid / "analysis" / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (grid / "analysis" / "figures.json").write_text(json.dumps({"figures": [{"file": "plot.png", "title": XSS,
                                                                             "caption": XSS}]}))
    report.update(directory=XSS, floor=XSS)
    report["bootstrap"]["n_resamples"] = XSS
    for cell in report["cells"]:
        cell["git_commit"] = XSS
        cell["config"] = {**(cell.get("config") or {}), "note": XSS}
    for tasks in report["summary"].values():
        tasks["sky"].update(n=XSS, mean=XSS, metric=XSS)
    for tasks in report["significance"].values():
        tasks["sky"]["delta"] = XSS
    return new_id


@pytest.mark.skipif(_chromium() is None, reason="Chromium not installed (make chromium)")
def test_headless_browser_runs_no_markup_from_the_data(grid_dir, tmp_path):
    """Markup in any value of the data shows as text: its image is never made and its handler never runs (it
    would mark the body), with the input that holds it open (the view that showed the first-stage rank raw)."""
    report = json.loads((grid_dir / "results.json").read_text())
    new_id = _plant_markup(grid_dir, report)
    page_mod.write_page(grid_dir, report)
    url = (grid_dir / "results.html").resolve().as_uri() + "#" + urlencode({"task": "sky", "open": new_id})
    dom = _dump_dom(url, tmp_path / "profile")
    assert "data-xss" not in dom and not re.search(r"<img[^>]*src=.x", dom)  # nothing ran, no image of the data
    shown = html_mod.escape(XSS, quote=False)  # the text as the DOM holds it
    assert f'<h3 id="detail-id">{html_mod.escape(new_id, quote=False)}</h3>' in dom  # the input opened
    assert f'<p id="detail-text">{shown} the input</p>' in dom and f'<b id="detail-gold">{shown}</b>' in dom
    assert f"first-stage rank {shown}" in dom and f"label <b>{shown}</b>" in dom  # evidence and demonstrations
    assert f"{shown}: 0.500" in dom and f"sky ({shown})" in dom  # a probability's label, the task's label words
    assert f"below {shown}" in dom and f"({shown} resamples)" in dom and f"<code>{shown}</code>" in dom
    assert f"<b>{shown}</b>: {shown}</figcaption>" in dom and "results-table" in dom and "diff-table" in dom


@pytest.mark.skipif(_chromium() is None, reason="Chromium not installed (make chromium)")
def test_headless_browser_renders_a_text_that_opens_a_comment(grid_dir, tmp_path):
    """An input text with ``<!-- <script>`` (which kept the page's data script from ever closing: nothing rendered)
    shows as text, and the page around it renders."""
    report = json.loads((grid_dir / "results.json").read_text())
    target = _lines(grid_dir / "sky" / "fid" / "seed-1" / "predictions_test.jsonl")[0]["id"]
    text = "<!-- <script> a film"  # no "-->" after it: the old page never closed its data script
    _plant_inputs(grid_dir, {target: {"text": text}})
    page_mod.write_page(grid_dir, report)
    dom = _dump_dom((grid_dir / "results.html").resolve().as_uri() + f"#task=sky&open={target}",
                    tmp_path / "profile")
    assert f'<h3 id="detail-id">{target}</h3>' in dom  # the input opened
    assert f'<p id="detail-text">{html_mod.escape(text, quote=False)}</p>' in dom
    assert "results-table" in dom and "diff-table" in dom and "pgra commit(s)" in dom


def _md_tables(md: str) -> list[list[list[str]]]:
    """The tables of markdown ``md`` as rows of cells, split where GitHub's tables split (a pipe without a
    backslash before it)."""
    tables, current = [], []
    for line in [*md.splitlines(), ""]:
        if line.startswith("|"):
            current.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
        elif current:
            tables.append(current)
            current = []
    return tables


def test_markdown_cells_escape_pipes_and_line_breaks():
    assert md_cell("a|b\nc\r\nd\re") == "a\\|b<br>c<br>d<br>e"
    assert md_cell("a\\|b") == "a\\\\\\|b" and md_cell("a\\b") == "a\\\\b"  # a backslash stays text
    assert md_table(["x|y", "z"], [[1, "p\nq"]]) == ["| x\\|y | z |", "|---|---|", "| 1 | p<br>q |"]


def test_results_md_tables_keep_their_shape_with_odd_names(grid_dir):
    """A task name and a label with ``|`` and a newline stay in their cells of every table of results.md."""
    report = json.loads((grid_dir / "results.json").read_text())
    odd, label = "sky|a\nb", "pos|itive\nlabel"
    report["tasks"] = [odd]
    for part in ("summary", "significance", "diagnostics"):
        for tasks in report[part].values():
            if "sky" in tasks:
                tasks[odd] = tasks.pop("sky")
    demos = [e["demonstrations"] for tasks in report["diagnostics"].values() for e in tasks.values()
             if e.get("demonstrations")]
    assert demos
    for d in demos:
        d["label_histogram"] = {label: 0.75, "town": 0.25}
    md = format_markdown(report)
    tables = _md_tables(md)
    assert len(tables) == 4  # results, differences, resolution, demonstrations
    for table in tables:
        assert all(len(row) == len(table[0]) for row in table), table
        assert set("".join(table[1])) == {"-"}
    assert tables[0][0][1].startswith(md_cell(odd)) and any(md_cell(label) in c for row in tables[3] for c in row)
    try:
        from markdown_it import MarkdownIt
    except ImportError:  # the split above is the check
        return
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    assert sum(t.type == "table_open" for t in tokens) == 4
    cells = [t.content for t in tokens if t.type == "inline"]
    assert "sky|a<br>b" in cells and "pos|itive<br>label 75%, town 25%" in cells


@pytest.mark.integration
@pytest.mark.skipif(_chromium() is None, reason="Chromium not installed (make chromium)")
def test_headless_browser_on_the_demo_page(tmp_path):
    """The demo's own page (written by `make demo`; skipped before it ran), regenerated by the current code."""
    from pgra.evaluation.report import write_report

    demo = Path(__file__).resolve().parents[1] / "runs" / "demo-experiment"
    if not (demo / "results.json").exists():
        pytest.skip("run `make demo` first: runs/demo-experiment has no results")
    copy = tmp_path / "demo-experiment"  # a copy: the test never writes into the user's run
    shutil.copytree(demo, copy, ignore=shutil.ignore_patterns("checkpoints", "best", "*.safetensors", ".pgra-lock",
                                                              "train-index", "sweep", "retrievers"))
    write_report(copy)
    _browse_disagreements(copy / "results.html", "mr", tmp_path / "profile")


def test_a_bundle_of_a_real_grid_reproduces_its_table_without_the_stages(grid_dir, tmp_path):
    """A bundle holds no stage data and no weights, yet `pgra report BUNDLE` writes the experiment's tables (its
    page shows the evidence ids the predictions name, without their texts)."""
    from pgra.cli import main
    from pgra.evaluation.bundle import verify_bundle

    bundle = tmp_path / "bundle"
    assert main(["bundle", str(grid_dir), "--out", str(bundle)]) == 0
    files = verify_bundle(bundle)["files"]
    assert sum(f["size"] for f in files.values()) < 5e6
    assert not any(name.endswith((".safetensors", ".bin", ".npy", ".faiss")) for name in files)
    assert not (bundle / "sky" / "candidates" / "test.jsonl").exists()
    assert main(["report", str(bundle)]) == 0

    def tables(md: str) -> list[str]:  # the tables' rows (the header line names the folder)
        return [line for line in md.splitlines() if line.startswith("|")]

    assert tables((bundle / "results.md").read_text()) == tables((grid_dir / "results.md").read_text())
    html = (bundle / "results.html").read_text(encoding="utf-8")
    assert _data(html)["summary"] == json.loads((grid_dir / "results.json").read_text())["summary"]


def _widen(grid: Path, report: dict, n: int) -> list[str]:
    """Add ``n`` methods to the grid (copies of fid's cells, named ``extra0`` ...: not registered methods) and to
    ``report`` (changed in place); returns every method."""
    for i in range(n):
        name = f"extra{i}"
        shutil.copytree(grid / "sky" / "fid", grid / "sky" / name)
        report["cells"] += [{**c, "method": name, "path": str(grid / "sky" / name / f"seed-{c['seed']}")}
                            for c in report["cells"] if c["method"] == "fid"]
        report["summary"][name] = json.loads(json.dumps(report["summary"]["fid"]))
        report["methods"].append(name)
    return report["methods"]


def test_page_states_units_names_scores_and_keeps_every_method_in_reach(grid_dir):
    """The results table says its values are percent where results.json holds fractions; the evidence's scores are
    named by what they are (per method, from its reranker); the input list scrolls both ways inside a box no taller
    than the window with its header row in view, so every method's column stays in reach with an input open."""
    from pgra.methods import get_method

    report = json.loads((grid_dir / "results.json").read_text())
    methods = _widen(grid_dir, report, 6)
    page_mod.write_page(grid_dir, report)
    html = (grid_dir / "results.html").read_text(encoding="utf-8")
    assert "in percent (results.json holds the same values as fractions: 85.3 here is 0.853 there)" in html
    data = _data(html)
    assert data["score_names"] == {"no_retrieval": "first-stage score", "fid": "first-stage score",
                                   "pgra": "probability", "knn_vote": "first-stage score",
                                   **{f"extra{i}": "score" for i in range(6)}}  # not registered: plain "score"
    assert {m: get_method(m).score_name() for m in ("fid_upr", "fid_mmr", "fid_cross_encoder", "fid_random",
                                                    "pgra_full")} == {
        "fid_upr": "log-probability", "fid_mmr": "marginal value", "fid_cross_encoder": "probability",
        "fid_random": "random draw", "pgra_full": "inner product"}
    assert data["methods"] == methods and len(methods) == 10
    assert all(set(x["p"]) == set(methods) for x in data["inputs"]["sky"])  # every method's, of every input
    rules = dict(re.findall(r"^([^{}\n]+?)\s*\{([^}]*)\}", html.split("<style>")[1].split("</style>")[0], re.M))
    box = rules[".browser > .list"]
    assert "overflow: auto" in box and "max-height: 95vh" in box
    assert "position: sticky" in rules["#inputs th"]


@pytest.mark.skipif(_chromium() is None, reason="Chromium not installed (make chromium)")
def test_headless_browser_shows_flags_score_names_and_every_method(grid_dir, tmp_path):
    """What a browser shows: "↑" / "↑k/n" where results.md has them, with their note; an opened input's evidence
    scores named per method; with 10 methods and an input open, every method's column and block, the list box
    within the window and scrolled sideways to its last column."""
    report = json.loads((grid_dir / "results.json").read_text())
    methods = _widen(grid_dir, report, 6)
    report["summary"]["pgra"]["sky"].update(still_improving=1, n=2)
    report["summary"]["fid"]["sky"].update(still_improving=2, n=2)
    report["summary"]["no_retrieval"]["sky"].update(still_improving=0, n=2)
    lines = _lines(grid_dir / "sky" / "pgra" / "seed-1" / "predictions_test.jsonl")
    target = next(x for x in lines if x["evidence"])["id"]
    _plant_inputs(grid_dir, {x["id"]: {"text": " ".join([x["text"]] * 12)} for x in lines})  # tall rows
    page_mod.write_page(grid_dir, report)
    page = grid_dir / "results.html"
    probe = """<script>
const list = document.querySelector(".browser > .list");
const last = Array.from(document.querySelectorAll("#inputs th")).pop();
list.scrollLeft = list.scrollWidth;
document.body.dataset.wider = String(list.scrollWidth > list.clientWidth);
document.body.dataset.fits = String(list.getBoundingClientRect().height <= innerHeight);
document.body.dataset.reached = String(last.getBoundingClientRect().right <= list.getBoundingClientRect().right + 1);
</script></body>"""
    page.write_text(page.read_text(encoding="utf-8").replace("</body>", probe), encoding="utf-8")
    dom = _dump_dom(page.resolve().as_uri() + f"#task=sky&open={target}", tmp_path / "profile", "1000,500")
    results = dom[dom.index('<table id="results-table">'):dom.index('<table id="diff-table">')]
    rows = dict(re.findall(r'<tr><td data-v="([^"]+)">[^<]*</td>(.*?)</tr>', results))
    assert re.search(r"</a> ↑1/2</td>", rows["pgra"]) and re.search(r"</a> ↑</td>", rows["fid"])
    assert "↑" not in rows["no_retrieval"] and "↑" not in rows["extra0"]
    assert "↑: the best dev score came at the last evaluation, still improving" in dom
    assert "sky (accuracy, %)" in dom and "0.853 there" in dom
    detail = dom[dom.index('<div id="detail"'):]
    assert re.search(r"\(probability \d\.\d{3}, first-stage rank \d+\)", detail.split('data-method="pgra"')[1])
    assert re.search(r"\(first-stage score -?\d+\.\d{3}, first-stage rank \d+\)",
                     detail.split('data-method="fid"')[1].split('data-method=')[0])
    head = dom[dom.index('<table id="inputs">'):].split("</thead>")[0]
    assert re.findall(r"<th>([^<]+)</th>", head)[3:] == methods  # id, input, gold, then every method
    assert all(f'data-method="{m}"' in detail for m in methods)
    assert 'data-wider="true"' in dom and 'data-fits="true"' in dom and 'data-reached="true"' in dom
