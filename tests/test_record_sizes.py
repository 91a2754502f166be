"""The size records the docs' figures come from (issue 71): scripts/record_torch_wheel.py reads the CPU torch wheel
of the Makefile's pin, scripts/record_model_sizes.py a model folder's bytes, parameters and source wheels."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.conftest import load_script


def test_the_torch_wheel_record_is_the_files_bytes_and_digest_and_refuses_another_wheel(tmp_path):
    wheel_script = load_script("scripts/record_torch_wheel.py")
    (tmp_path / "Makefile").write_text("\t$(PIP) install torch==2.13.0 $(if $(TORCH_INDEX),--index-url x)\n")
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"w" * 1234)
    record = wheel_script.record(wheel, tmp_path)
    assert (record["file"], record["bytes"], record["sha256"]) == (wheel.name, 1234,
                                                                    hashlib.sha256(b"w" * 1234).hexdigest())
    other = tmp_path / "torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    other.write_bytes(b"w")
    with pytest.raises(SystemExit, match=r"error: torch-2\.12\.0.*not the CPU wheel of the Makefile's torch==2\.13\.0"):
        wheel_script.record(other, tmp_path)


def test_a_model_record_is_its_folders_bytes_its_safetensors_parameters_and_its_wheels(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    sizes = load_script("scripts/record_model_sizes.py")
    folder = tmp_path / "models" / "lm-0.5b"
    folder.mkdir(parents=True)
    save_file({"a": torch.zeros(3, 4), "b": torch.zeros(5)}, str(folder / "model.safetensors"))
    (folder / ".pgra-source.json").write_text(json.dumps({"parts": [{"wheel": "p1.whl"}, {"wheel": "p2.whl"}]}))
    wheels = tmp_path / sizes.WHEELS
    wheels.mkdir(parents=True)
    (wheels / "p1.whl").write_bytes(b"x" * 100)
    with pytest.raises(SystemExit, match=r"error: \.venv/wheels/qwen: no p2\.whl"):
        sizes.model_record(folder, tmp_path)
    (wheels / "p2.whl").write_bytes(b"x" * 50)
    record = sizes.model_record(folder, tmp_path)
    assert record["folder"] == "models/lm-0.5b" and record["parameters"] == 17
    assert record["bytes"] == sum(p.stat().st_size for p in folder.iterdir())
    assert (record["wheels"], record["wheels_bytes"]) == (2, 150)
    assert list(sizes.record(tmp_path)["models"]) == ["lm-0_5b"]  # a figure's path splits on "."


def test_a_page_record_is_the_bytes_of_the_page_pgra_report_writes_for_the_bundles(tmp_path):
    """docs/experiments.md's page sizes: what ``write_report`` writes for a committed bundle, its data inside the page."""
    from tests.conftest import ROOT

    pages = load_script("scripts/record_page_sizes.py")
    out = tmp_path / "page"
    record = pages.page_bytes([ROOT / pages.ONE], out)
    assert record["cells"] == len(json.loads((out / "results.json").read_text())["cells"]) > 0
    assert record["html_bytes"] == (out / "results.html").stat().st_size and record["data_bytes"] == 0
    assert record["html_bytes"] > 1_000_000  # the page holds the bundle's predictions
