"""Verify and repair: a damaged or half-written index is rebuilt on a plain re-run (saying so), --overwrite
always rebuilds, and artifacts get the permissions of the user's umask."""

from __future__ import annotations

import json
import os
import stat

import pytest

from pgra.cli import main
from pgra.retrieval.index import Index
from pgra.runtime.training import read_checkpoint
from pgra.storage.artifacts import MANIFEST, read_json
from tests import numerics


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


def _damage_cache(cache_dir, damage: str) -> None:
    import numpy as np

    (folder,) = {p.parent for p in cache_dir.rglob("key.json") if "queries" not in p.read_text()}
    vectors = folder / "vectors.npy"
    if damage == "truncate vectors":
        vectors.write_bytes(vectors.read_bytes()[: vectors.stat().st_size // 2])
    elif damage == "garbage row":  # a marked row's bytes overwritten
        done = np.load(folder / "done.npy")
        row = int(np.flatnonzero(done)[-1])
        v = np.load(vectors, mmap_mode="r+")
        v[row] = np.nan
        v.flush()
    elif damage == "garbage key":
        (folder / "key.json").write_text('{"key": ')
    else:
        (folder / "done.npy").unlink()


@pytest.mark.parametrize("damage,says", [
    ("truncate vectors", "vectors.npy is truncated; its "), ("garbage row", "1 rows marked filled hold no unit"),
    ("delete done", "done.npy is missing; every row is embedded again"),
    ("garbage key", "key.json is unreadable (JSONDecodeError); rebuilding the embedding cache")])
def test_a_damaged_embedding_cache_is_repaired_on_a_plain_rerun(damage, says, tmp_path, candidates, tiny_opt,
                                                                 capsys):
    """The damaged rows (all of them when the marks or the key are lost) are embedded again, the intact ones are
    kept, and the reranked files equal the undamaged run's."""
    def rerank(out):
        argv = ["rerank", "--candidates", str(candidates), "--out", str(tmp_path / out), "--lm", str(tiny_opt),
                "--cache-dir", str(tmp_path / "cache"), "--top-d", "3", "--num-demos", "2", "--no-show-progress"]
        assert main(argv) == 0, capsys.readouterr().err
        embedding = read_json(tmp_path / out / MANIFEST)["embedding"]
        return capsys.readouterr().err, embedding["evidence_cache_hits"], embedding["evidence_rows"]

    _, hits, rows = rerank("first")
    assert hits == 0 and rows > 4
    _damage_cache(tmp_path / "cache", damage)
    err, hits, _ = rerank("second")
    lines = [line for line in err.splitlines() if "cache/" in line]
    assert len(lines) == 1 and says in lines[0], err
    kept = {"truncate vectors": range(1, rows - 1), "garbage row": [rows - 1]}.get(damage, [0])
    assert hits in kept, (hits, rows)  # what was intact is not embedded again
    for name in ("train.jsonl", "test.jsonl"):  # rows embedded in other batches than before: equal by the policy
        first, second = ([json.loads(line)["ctxs"] for line in (tmp_path / out / name).read_text().splitlines()]
                         for out in ("first", "second"))
        numerics.assert_same_rankings(second, first, depth=numerics.TINY_MODEL, what=name)
    err, hits, _ = rerank("third")
    assert "cache/" not in err and hits == rows  # repaired: a plain re-run finds it whole


def test_cache_rows_past_a_cut_are_embedded_again_and_the_rest_kept(tmp_path):
    import numpy as np

    from pgra.rerank.prompt_guided.cache import EmbeddingCache

    cache = EmbeddingCache(tmp_path, {"k": 1}, 10, 4)
    unit = np.eye(4, dtype=np.float32)[[0, 1, 2, 3, 0, 1]]
    cache.put(np.arange(6), unit)
    vectors = cache.directory / "vectors.npy"
    vectors.write_bytes(vectors.read_bytes()[:-(10 - 4) * 16 - 5])  # mid-row 3
    again = EmbeddingCache(tmp_path, {"k": 1}, 10, 4)
    assert again.missing(np.arange(10)).tolist() == [3, 4, 5, 6, 7, 8, 9]
    assert (again.get(np.arange(3)) == unit[:3]).all()
    done = cache.directory / "done.npy"
    again.put(np.arange(3, 6), unit[3:])
    done.write_bytes(done.read_bytes()[:-8])  # marks of rows 2.. lost
    assert EmbeddingCache(tmp_path, {"k": 1}, 10, 4).missing(np.arange(10)).tolist() == list(range(2, 10))


def test_a_read_only_cache_is_mapped_read_only(tmp_path):
    """An export's store is only read (pgra_full's replay): mapped read-only, it loads from a folder nobody may
    write, and nothing can change it by mistake."""
    import numpy as np

    from pgra.rerank.prompt_guided.cache import EmbeddingCache

    unit = np.eye(4, dtype=np.float32)[[0, 1, 2]]
    EmbeddingCache(tmp_path, {"k": 1}, 3, 4).put(np.arange(3), unit)
    ro = EmbeddingCache(tmp_path, {"k": 1}, 3, 4, create=False, read_only=True)
    assert (ro.get(np.arange(3)) == unit).all()
    with pytest.raises(ValueError, match="read-only"):
        ro.vectors[0] = 0
    with pytest.raises(ValueError, match="never created"):
        EmbeddingCache(tmp_path, {"k": 1}, 3, 4, read_only=True)


def test_a_damaged_cache_is_refused_by_name_where_it_is_not_created(tmp_path):
    """Ranks other than 0 open caches with create=False: they name the damage instead of racing to rebuild."""
    import numpy as np

    from pgra.core.errors import IncompleteArtifactError
    from pgra.rerank.prompt_guided.cache import EmbeddingCache

    cache = EmbeddingCache(tmp_path, {"k": 1}, 5, 3)
    cache.put(np.array([1, 3]), np.eye(3)[:2])
    (cache.directory / "done.npy").write_bytes(b"\x93NUMPY")
    with pytest.raises(IncompleteArtifactError, match="done.npy is unreadable"):
        EmbeddingCache(tmp_path, {"k": 1}, 5, 3, create=False)
    again = EmbeddingCache(tmp_path, {"k": 1}, 5, 3)  # rank 0 rebuilds: every row is missing again
    assert again.missing(np.arange(5)).tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage marker"])
def test_a_damaged_checkpoint_is_skipped_for_the_one_before(damage, tmp_path, reranked, tiny_t5, capsys):
    """Reader (and SimCSE, which shares the code) checkpoints record their files' sizes and checksums; a plain
    re-run skips a damaged one, resumes from the previous, and ends with the uninterrupted run's weights."""
    from safetensors.torch import load_file

    def train(out):
        argv = ["train", "--data", str(reranked), "--out", str(tmp_path / out), "--model", str(tiny_t5),
                "--n-passages", "2", "--max-length", "48", "--batch-size", "4", "--max-steps", "7",
                "--eval-every", "0", "--save-every", "3", "--keep-checkpoints", "3", "--learning-rate", "1e-3",
                "--no-show-progress", "--keep-resume-state"]  # a finished run's checkpoints kept, to damage
        assert main(argv) == 0, capsys.readouterr().err
        return capsys.readouterr().out

    train("ref")
    train("run")
    ckpt = tmp_path / "run" / "checkpoints" / "step_7"  # the last (step 7 ends the run), after steps 3 and 6
    assert (ckpt / "trainer_state.json").exists() and (tmp_path / "run" / "checkpoints" / "step_6").exists()
    target = ckpt / "model.safetensors"
    if damage == "truncate":
        target.write_bytes(target.read_bytes()[:-100])
    elif damage == "flip":
        data = bytearray(target.read_bytes())
        data[-5] ^= 0xFF
        target.write_bytes(bytes(data))
    else:
        (ckpt / "trainer_state.json").write_text("{")
    out = train("run")
    assert f"{ckpt}: " in out and "skipping this damaged checkpoint" in out and "resuming from" in out
    assert "step_6 (step 6)" in out
    a = load_file(str(tmp_path / "ref" / "best" / "model.safetensors"))
    b = load_file(str(tmp_path / "run" / "best" / "model.safetensors"))
    assert all(bool((a[k] == b[k]).all()) for k in a)
    assert read_checkpoint(ckpt)[1] is None  # step 7 was written again, whole


def test_a_skipped_damaged_checkpoint_does_not_outlive_the_new_ones(tmp_path, reranked, tiny_t5, capsys):
    """With one checkpoint kept, a run that skipped a damaged step_7 and started over keeps its own step_3 (not
    the damaged step_7): killed again at step 5, the next re-run resumes from step 3 instead of from scratch."""
    from tests.test_fault_injection import _killed

    argv = ["train", "--data", str(reranked), "--out", str(tmp_path / "run"), "--model", str(tiny_t5),
            "--n-passages", "2", "--max-length", "48", "--batch-size", "4", "--max-steps", "7", "--eval-every", "0",
            "--save-every", "3", "--keep-checkpoints", "1", "--learning-rate", "1e-3", "--no-show-progress",
            "--keep-resume-state"]
    assert main(argv) == 0, capsys.readouterr().err
    ckpts = tmp_path / "run" / "checkpoints"
    assert [p.name for p in ckpts.iterdir()] == ["step_7"]
    (ckpts / "step_7" / "trainer_state.json").write_text("{")
    _killed(argv[:], "train.step@5")  # started over (step_7 skipped), checkpointed step 3, killed at step 5
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_3"]
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "resuming from" in out and "step_3 (step 3)" in out and "skipping" not in out


def test_damaged_cache_rows_are_reported_once_and_only_by_the_reporting_rank(tmp_path, capsys):
    import numpy as np

    from pgra.rerank.prompt_guided.cache import EmbeddingCache

    cache = EmbeddingCache(tmp_path, {"k": 1}, 6, 4)
    cache.put(np.arange(3), np.eye(4, dtype=np.float32)[:3])
    cache.vectors[1] = 0.0  # marked filled, no unit vector
    other_rank = EmbeddingCache(tmp_path, {"k": 1}, 6, 4, create=False, report=False)
    assert other_rank.missing(np.arange(6)).tolist() == [1, 3, 4, 5]
    assert capsys.readouterr().err == ""
    assert cache.missing(np.arange(6)).tolist() == [1, 3, 4, 5]
    assert cache.missing(np.arange(6)).tolist() == [1, 3, 4, 5]
    assert capsys.readouterr().err.count("1 rows marked filled hold no unit vector") == 1
