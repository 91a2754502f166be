"""The times and demo tables on every CPU measured (docs/experiments.md) are what the committed record gives."""

import json
from pathlib import Path

import pytest

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def table():
    return load_script("scripts/machine_table.py")


def test_the_page_holds_the_records_tables(table):
    record = json.loads(table.RECORD.read_text(encoding="utf-8"))
    for run in record["runs"]:  # every run names a known CPU and level, and measured something
        assert run["cpu"] in record["cpus"] and run["level"] in record["levels"], run
        assert run["what"] in ("demo", "test") and (run["after_setup_s"] or run["with_setup_s"]), run
    columns = record["demo_tables"]["columns"]
    assert all(len(v) == len(columns) for v in record["demo_tables"]["rows"].values())
    page = table.PAGE.read_text(encoding="utf-8")
    assert table.replace_blocks(page, table.render(record)) == page, \
        "docs/experiments.md differs from docs/results/machines.json: run python scripts/machine_table.py --write"


def test_a_row_says_where_it_holds(table):
    assert table._holds([70.0, 70.0, 70.0], ["fp32", "fp32", "bf16"]) == "every CPU measured"
    assert table._holds([59.5, 59.5, 68.0], ["fp32", "fp32", "bf16"]).startswith("every fp32 run")
    assert "8.5 points" in table._holds([59.5, 59.5, 68.0], ["fp32", "fp32", "bf16"])
    assert table._holds([65.5, 71.0, 67.5], ["fp32", "fp32", "bf16"]) == "no: rounding moves it by up to 5.5 points"
    with pytest.raises(SystemExit, match="no <!-- machine-times -->"):
        table.replace_blocks("no markers", {"machine-times": "x"})
