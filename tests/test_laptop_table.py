"""The laptop table in the README and docs/experiments.md is what merging the committed bundles gives (issue 51):
rebuilt here from docs/results/laptop/*/ and compared with both copies and with the committed merged report."""

import json
from pathlib import Path

import pytest

from tests import numerics
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built():
    module = load_script("scripts/laptop_table.py")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)  # the bundles are named relative to the repository, as the merged report names them
        sources = module.bundles()
        report = module.build(sources)
    return module, sources, report


def _close(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        # float64 statistics recomputed from the committed predictions: the bootstrap's replicates sum up to 6,000
        # terms over 10^3 resamples, summed in numpy's SIMD order, which differs between instruction sets
        return a == numerics.close(b, dtype="float64", depth=10 ** 7)
    return a == b


def test_the_docs_tables_are_the_bundles_merged(built):
    module, sources, report = built
    assert {s.parts[-1].split("-seed")[0] for s in sources} == {"mr", "wiki_topic"}  # both tasks committed
    assert report["tasks"] == ["mr", "wiki_topic"] and report["reference"] == "fid"
    text = module.block(report, sources)
    for path in module.DOCS:
        assert f"{module.START}\n{text}\n{module.END}" in path.read_text(encoding="utf-8"), \
            f"{path.name}: run python scripts/laptop_table.py --write"
    # the table's numbers are the report's: PGRA's row on MR from its summary and its Holm-adjusted p-value
    pgra = next(line for line in text.splitlines() if line.startswith("| pgra |"))
    s, sig = report["summary"]["pgra"]["mr"], report["significance"]["pgra"]["mr"]
    assert f"{100 * s['mean']:.1f} ± {100 * s['std']:.1f} ({s['n']})" in pgra
    assert f"Holm {sig['p_holm_all']:.3f}" in pgra and f"{100 * sig['mde']:.1f} / " in pgra


def test_the_committed_merged_report_and_analyses_are_current(built):
    module, sources, report = built
    merged = json.loads((module.MERGED / "results.json").read_text(encoding="utf-8"))
    assert [s["path"] for s in merged["sources"]] == [s.as_posix() for s in sources]
    # equal up to the last bits a CPU's other SIMD width may change in the bootstrap's sums
    assert _close(merged["summary"], report["summary"]) and _close(merged["significance"], report["significance"])
    tables = json.loads((module.MERGED / "analysis" / "analysis.json").read_text(encoding="utf-8"))["tables"]
    assert set(tables) == set(module.ANALYSES)
    assert {r["task"] for r in tables["differences"]} == {"mr", "wiki_topic"}
    # the analyses recomputed from the bundles alone (no model folder read) are the committed ones
    from pgra.analysis.base import ANALYSES
    from pgra.analysis.results import ResultsRuns

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        runs = ResultsRuns.merged(sources, module.MERGED.relative_to(ROOT), list(module.ANALYSES))
        fresh = json.loads(json.dumps({n: ANALYSES[n].compute(runs, None) for n in module.ANALYSES}))
    assert _close(fresh, tables)
