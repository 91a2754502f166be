"""Verify and repair: a damaged or half-written index is rebuilt on a plain re-run (saying so), --overwrite
always rebuilds, and artifacts get the permissions of the user's umask."""

from __future__ import annotations

import os
import stat

import pytest

from pgra.artifacts import MANIFEST, read_json
from pgra.cli import main
from pgra.retrieval.index import Index


def _build(argv_extra, corpus_txt, out, capsys):
    argv = ["build-index", "--corpus", str(corpus_txt), "--out", str(out), "--no-show-progress", *argv_extra]
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def _hits(out):
    return Index(out).search_hits(["the moon orbits"], k=3)[0]


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "cut manifest"])
def test_damaged_bm25_index_is_rebuilt_on_a_plain_rerun(damage, tmp_path, corpus_txt, capsys):
    out = tmp_path / "idx"
    _build(["--retriever", "bm25"], corpus_txt, out, capsys)
    before = _hits(out)
    name = next(iter(read_json(out / MANIFEST)["files"]))
    target = out / name
    if damage == "truncate":
        target.write_bytes(target.read_bytes()[:-7])
    elif damage == "flip":  # same size, other bytes: only the checksum sees it
        data = bytearray(target.read_bytes())
        data[-1] ^= 0xFF
        target.write_bytes(bytes(data))
    elif damage == "delete":
        target.unlink()
    else:
        text = (out / MANIFEST).read_text()
        (out / MANIFEST).write_text(text[: len(text) // 2])
    said = _build(["--retriever", "bm25"], corpus_txt, out, capsys)
    assert "rebuilding" in said and "nothing to do" not in said, said
    assert _hits(out) == before
    assert "nothing to do" in _build(["--retriever", "bm25"], corpus_txt, out, capsys)


def test_truncated_dense_index_and_corpus_are_rebuilt(tmp_path, corpus_txt, tiny_bert, capsys):
    out = tmp_path / "idx"
    flags = ["--encoder", str(tiny_bert), "--shard-size", "10"]
    _build(flags, corpus_txt, out, capsys)
    before = _hits(out)
    faiss_file = out / "index.faiss"
    faiss_file.write_bytes(faiss_file.read_bytes()[:100])
    said = _build(flags, corpus_txt, out, capsys)
    assert "index.faiss" in said and "rebuilding" in said, said
    assert _hits(out) == before
    texts = out / "corpus" / "texts.bin"
    texts.write_bytes(texts.read_bytes()[:-20])
    said = _build(flags, corpus_txt, out, capsys)
    assert "texts.bin" in said and "rebuilding" in said, said
    assert _hits(out) == before


def test_overwrite_always_rebuilds(tmp_path, corpus_txt, capsys):
    out = tmp_path / "idx"
    _build(["--retriever", "bm25"], corpus_txt, out, capsys)
    stamp = (out / MANIFEST).stat().st_mtime_ns
    said = _build(["--retriever", "bm25", "--overwrite"], corpus_txt, out, capsys)
    assert "nothing to do" not in said
    assert (out / MANIFEST).stat().st_mtime_ns != stamp
    assert "nothing to do" in _build(["--retriever", "bm25"], corpus_txt, out, capsys)


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_artifacts_get_the_umask_permissions(umask, tmp_path, corpus_txt, capsys):
    old = os.umask(umask)
    try:
        out = tmp_path / "idx"
        _build(["--retriever", "bm25"], corpus_txt, out, capsys)
    finally:
        os.umask(old)
    paths = [p for p in out.rglob("*") if not p.name.startswith(".")]
    assert paths
    for p in paths:
        mode = stat.S_IMODE(p.stat().st_mode)
        want = (0o777 if p.is_dir() else 0o666) & ~umask
        assert mode == want, (p, oct(mode), oct(want))
