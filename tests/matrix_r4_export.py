"""Bad-input matrix cases of reliability round 4 (issue 53), export surfaces: (name, argv builder, expected text of the
one `error:` line), appended to tests/test_bad_input_matrix.py's CASES. Builders write under ``w["tmp"]`` only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _run(w: dict, n_passages: int = 0) -> Path:
    """A finished reader run made by hand (tests/test_export.py's fake_run) in an experiment-like folder."""
    from tests.test_export import fake_run

    run = fake_run(w["tmp"] / "exp" / "sky" / "fid", n_passages=n_passages)
    if n_passages:
        manifest = json.loads((run / "manifest.json").read_text())
        (run / "manifest.json").write_text(json.dumps({**manifest, "data": str(w["cands"])}))
    return run


def _export(w: dict, run: Path, *extra: str) -> list[str]:
    return ["export", "--run", str(run), "--out", str(w["tmp"] / "o"), *extra]


def _secret(w: dict) -> Path:
    secret = w["tmp"] / "hf-token"
    secret.write_text("hf_secret")
    return secret


def link_in_best(w: dict) -> list[str]:
    run = _run(w)
    (run / "best" / "tokenizer.json").symlink_to(_secret(w))
    return _export(w, run)


def link_in_copied_index(w: dict) -> list[str]:
    run = _run(w, n_passages=2)
    (w["index"] / "token").symlink_to(_secret(w))
    return _export(w, run, "--copy-index")


def sibling_metric_text(w: dict) -> list[str]:
    from tests.test_export import sibling_cell

    run = _run(w)
    sibling_cell(run, value="high")
    return _export(w, run)


def fid_config_without_n_passages(w: dict) -> list[str]:
    run = _run(w)
    (run / "best" / "fid_config.json").write_text('{"max_length": 32}')
    return _export(w, run)


def truncated_weights(w: dict) -> list[str]:
    run = _run(w)
    weights = run / "best" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    return _export(w, run)


def into_a_run(w: dict) -> list[str]:
    from tests.test_export import fake_run

    return ["export", "--run", str(_run(w)), "--out", str(fake_run(w["tmp"] / "other"))]


def into_the_experiment(w: dict) -> list[str]:
    return ["export", "--run", str(_run(w)), "--out", str(w["tmp"] / "exp")]


def predict_edited_export(w: dict) -> list[str]:
    from pgra.serving.export import export_run

    out = export_run(_run(w), w["tmp"] / "exported")
    spec = json.loads((out / "export.json").read_text())
    index = {"copied": False, "path": str(w["index"]), "corpus_content_sha256": "x"}
    (out / "export.json").write_text(json.dumps({**spec, "index": index, "k": "8"}))
    return ["predict", "--run", str(out), "--text", "The moon."]


CASES: list[tuple[str, Callable[[dict], list[str]], Any]] = [
    ("export: a link in best/ to the Hub token", link_in_best, "best/tokenizer.json is a symbolic link to"),
    ("export --copy-index: a link in the index", link_in_copied_index, "bm25/token is a symbolic link to"),
    ("export: a sibling seed's metric is text", sibling_metric_text,
     "seed-2/cell.json (field 'results.test.accuracy')"),
    ("export: fid_config.json without n_passages", fid_config_without_n_passages,
     "fid_config.json (field 'n_passages')"),
    ("export: truncated weights", truncated_weights, "truncated or corrupted"),
    ("export --out a reader run", into_a_run, "holds a 'reader' artifact"),
    ("export --out the experiment", into_the_experiment, "holds the input"),
    ("predict: a hand-edited export.json", predict_edited_export, "export.json (field 'k')"),
]
