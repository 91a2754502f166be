"""results.html: the self-contained page of a finished grid (data against the cells' files, escaping, paging the
data into a script beside it) and, where Chromium is installed, what a headless browser shows."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pgra.config import from_dict
from pgra.evaluation import page as page_mod
from pgra.experiment import Experiment, ExperimentConfig
from tests.conftest import write_corpus, write_sky_task
from tests.test_experiment import _config

MARK = "window.PGRA_DATA = "


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _data(html: str) -> dict:
    start = html.index(MARK) + len(MARK)
    return json.loads(html[start:html.index(";</script>", start)].replace("<\\/", "</"))


@pytest.fixture(scope="module")
def finished_grid(tmp_path_factory, tiny_opt, tiny_t5) -> Path:
    """One finished grid (no_retrieval, fid, pgra over 2 seeds; knn_vote) shared by this module's tests."""
    root = tmp_path_factory.mktemp("page-grid")
    cfg = _config(root, write_corpus(root), write_sky_task(root), tiny_opt, tiny_t5,
                  methods=["no_retrieval", "fid", "pgra", "knn_vote"], seeds=[1, 2])
    assert not Experiment(from_dict(ExperimentConfig, cfg)).run()
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
                assert shown[2] == {k: pytest.approx(v, abs=1e-4) for k, v in line["scores"].items()}
                evidence = shown[3]
                assert [k.split(":", 1)[1] for k, _, _ in evidence] == [str(e) for e in line["evidence"]]
                for key, score, rank in evidence:
                    eid = key.split(":", 1)[1]
                    if method == "pgra":  # the reranker's probability and the first-stage rank
                        ctx = next(c for c in reranked[line["id"]]["ctxs"] if str(c["id"]) == eid)
                        assert (score, rank) == (pytest.approx(ctx["score"], abs=1e-4), ctx["retrieval_rank"])
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


def test_text_that_looks_like_markup_stays_data(grid_dir):
    report = json.loads((grid_dir / "results.json").read_text())
    preds = grid_dir / "sky" / "fid" / "seed-1" / "predictions_test.jsonl"
    lines = _lines(preds)
    lines[0]["text"] = "</script><script>alert(1)</script> {{DATA}} {{TITLE}}"
    preds.write_text("".join(json.dumps(x) + "\n" for x in lines))
    page_mod.write_page(grid_dir, report)
    html = (grid_dir / "results.html").read_text(encoding="utf-8")
    assert html.count("</script>") == 2  # the data's and the page script's own
    assert _data(html)["inputs"]["sky"][0]["text"].startswith("</script><script>alert(1)")


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


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
    url = page.resolve().as_uri() + f"#task={task}&disagree=1&open={chosen['id']}"
    proc = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
                           f"--user-data-dir={profile}", "--dump-dom", url], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
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
