"""Bad-input matrix cases of reliability round 5 (issue 67), results bundles as untrusted input: links, traversal,
markup, malformed JSON and forged checksums in a bundle, and links met while bundling. (name, argv builder, expected
text of the one `error:` line), appended to tests/test_bad_input_matrix.py's CASES. Builders write under ``w["tmp"]``
only."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

CASES: list[tuple[str, Callable[[dict], list[str]], Any]] = []


def _experiment(w: dict) -> Path:
    """An experiment folder of finished sst2 cells (fid, pgra x 3 seeds) with its candidates' records."""
    from tests.test_bundle_merge import _cells

    root = w["tmp"] / "r5-exp"
    if not root.exists():
        _cells(root, "sst2")
        (root / "sst2" / "candidates" / "cost.json").write_text(json.dumps(
            {"stage_key": "cand-sst2", "elapsed_s": 1.0, "work": []}))
    return root


def _bundle(w: dict, name: str = "r5-bundle") -> Path:
    from pgra.evaluation.bundle import write_bundle

    write_bundle(_experiment(w), w["tmp"] / name)
    return w["tmp"] / name


def _forged(w: dict, rel: str, data: str | bytes) -> Path:
    """A bundle whose file ``rel`` holds ``data``, its manifest's checksums forged to match."""
    from tests.test_untrusted_bundles import forge

    bundle = _bundle(w)
    forge(bundle, rel, data)
    return bundle


def _linked_analysis(w: dict, empty: bool) -> Path:
    """A bundle whose ``analysis/`` links to another experiment's analyses (or to an empty folder)."""
    target = w["tmp"] / ("r5-empty" if empty else "r5-mine/analysis")
    target.mkdir(parents=True)
    if not empty:
        (target / "analysis.md").write_text("# mine\n")
        (target / "fig.png").write_bytes(b"\x89PNG mine")
    bundle = _bundle(w)
    (bundle / "analysis").symlink_to(target)
    return bundle


def _figures(w: dict, index: Any) -> Path:
    bundle = _bundle(w)
    (bundle / "analysis").mkdir()
    (bundle / "analysis" / "a.png").write_bytes(b"\x89PNG")
    (bundle / "analysis" / "figures.json").write_text(index if isinstance(index, str) else json.dumps(index))
    return bundle


def _secret(w: dict) -> Path:
    path = w["tmp"] / "r5-secret.png"
    path.write_bytes(b"TOKEN not for sharing")
    return path


def _manifest(w: dict, change: Callable[[str], str]) -> Path:
    bundle = _bundle(w)
    (bundle / "manifest.json").write_text(change((bundle / "manifest.json").read_text()))
    return bundle


def _prediction(w: dict, field: str, value: Any) -> Path:
    """An experiment folder whose first fid cell's first prediction holds ``value`` as ``field``."""
    root = _experiment(w)
    path = root / "sst2" / "fid" / "seed-1" / "predictions_test.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[0][field] = value
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return root


def _cell(w: dict, field: str, value: Any) -> Path:
    root = _experiment(w)
    cell = root / "sst2" / "pgra" / "seed-1" / "cell.json"
    cell.write_text(json.dumps({**json.loads(cell.read_text()), field: value}))
    return root


def _listed_link(w: dict) -> Path:
    """A bundle whose manifest lists, with its size and SHA-256, a link to a file of this machine."""
    from tests.test_untrusted_bundles import list_a_link

    bundle = _bundle(w)
    list_a_link(bundle, w["tmp"] / "r5-cost.json")
    return bundle


def _added_stage(w: dict) -> Path:
    bundle = _bundle(w)
    (bundle / "sst2" / "reranked").mkdir()
    (bundle / "sst2" / "reranked" / ".stage_key").write_text("forged\n")
    return bundle


def _linked_cost(w: dict) -> Path:
    root = _experiment(w)
    token = w["tmp"] / "r5-token"
    token.write_text("TOKEN not for sharing")
    cost = root / "sst2" / "candidates" / "cost.json"
    cost.unlink()
    cost.symlink_to(token)
    return root


def _out_link(w: dict) -> list[str]:
    _bundle(w, "r5-real")
    os.symlink(w["tmp"] / "r5-real", w["tmp"] / "r5-link")
    return ["bundle", str(_experiment(w)), "--out", str(w["tmp"] / "r5-link")]


def _report(folder: Path, *extra: str) -> list[str]:
    return ["report", str(folder), "--bootstrap", "20", *extra]


CASES += [
    # H1: a link out of a bundle, which --analyses would write through
    ("report: a bundle's analysis/ links to another experiment's", lambda w: _report(_linked_analysis(w, False)),
     "a symbolic link in a bundle"),
    ("report --analyses: a bundle's analysis/ links to an empty folder",
     lambda w: _report(_linked_analysis(w, True), "--analyses", "differences"), "a symbolic link in a bundle"),
    # H2: figure names outside the bundle's analysis/
    ("report: figures.json names an absolute file", lambda w: _report(_figures(w, {"figures": [
        {"file": str(_secret(w)), "title": "t", "caption": "c"}]})), "(field 'figures[0].file')"),
    ("report: figures.json names ../", lambda w: _report(_figures(w, {"figures": [
        {"file": "../../r5-secret.png", "title": "t", "caption": "c"}]})), "(field 'figures[0].file')"),
    # H6: malformed files of a bundle
    ("report: figures.json is a list", lambda w: _report(_figures(w, "[1]")), "figures.json: holds a JSON list"),
    ("report: figures.json entry without a title", lambda w: _report(_figures(w, {"figures": [{"file": "a.png"}]})),
     "(field 'figures[0].title')"),
    ("report: a bundle's manifest nested too deep",
     lambda w: _report(_manifest(w, lambda _: "[" * 100_000 + "]" * 100_000)), "corrupted JSON (nested too deeply)"),
    ("report: a bundle's manifest with a 5,000-digit number",
     lambda w: _report(_manifest(w, lambda t: t.rstrip()[:-1] + ', "x": ' + "9" * 5000 + "}")),
     "corrupted JSON (Exceeds the limit"),
    ("report: prediction scores a list", lambda w: _report(_prediction(w, "scores", [1, 2])), "field 'scores'"),
    ("report: prediction evidence of objects", lambda w: _report(_prediction(w, "evidence", [{"id": 1}])),
     "field 'evidence'"),
    ("report --analyses cost: a bundle's cost.json a list (checksums forged)",
     lambda w: _report(_forged(w, "sst2/candidates/cost.json", "[1]"), "--out", str(w["tmp"] / "o"), "--analyses",
                       "cost"), "cost.json: must be an object"),
    ("report merged: a bundle's stage key not UTF-8 (checksums forged)",
     lambda w: _report(_forged(w, "sst2/candidates/.stage_key", b"\xff\xfe"), str(_experiment(w)), "--out",
                       str(w["tmp"] / "o")),
     ".stage_key:1: undecodable bytes"),
    # forged checksums: a listed link to a file of this machine
    ("report --analyses cost: a bundle lists a link, its checksum forged",
     lambda w: _report(_listed_link(w), "--out", str(w["tmp"] / "o"), "--analyses", "cost"),
     "a symbolic link in a bundle"),
    # H13, H14: a newer format, a stage folder added by hand
    ("report: a bundle of a newer format", lambda w: _report(_manifest(w, lambda t: t.replace(
        '"format": 1', '"format": 2'))), "the bundle is of format 2, written by a newer pgra"),
    ("report: a stage folder added to a bundle by hand", lambda w: _report(_added_stage(w)),
     "holds sst2/reranked/.stage_key, which its manifest does not list"),
    # H7: a name with markup, refused before results.json is written
    ("report: a cell's method with markup", lambda w: _report(_cell(w, "method", "<b>pgra</b>")), "field 'method'"),
    # H5, H12: bundling
    ("bundle: a stage's cost.json links to a token",
     lambda w: ["bundle", str(_linked_cost(w)), "--out", str(w["tmp"] / "o")],
     "is a symbolic link, not a file the experiment wrote"),
    ("bundle --out a link to a bundle", _out_link, "r5-link is a symbolic link (to "),
]
