import json

import numpy as np
import pytest

from pgra.cli import main
from pgra.core.errors import IncompleteArtifactError, StaleArtifactError
from pgra.data.corpus import CorpusSource
from pgra.retrieval import encoder as encoder_mod
from pgra.retrieval.index import DenseConfig, Index, IndexConfig, build_index
from tests import numerics
from tests.conftest import SENTENCES


def _dense_cfg(corpus, out, encoder, **kw):
    return IndexConfig(corpus=str(corpus), out=str(out), retriever="dense", show_progress=False,
                       dense=DenseConfig(encoder=str(encoder), pooler="cls", max_length=64, batch_size=4,
                                         shard_size=8, **kw))


def test_dense_build_search_and_manifest(corpus_txt, tmp_path, tiny_bert):
    out = build_index(_dense_cfg(corpus_txt, tmp_path / "idx", tiny_bert))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["retriever"] == "dense" and manifest["pooler"] == "cls" and manifest["dim"] == 32
    assert manifest["size"] == len(SENTENCES) and manifest["encoder_fingerprint"]
    assert manifest["corpus"]["source_fingerprint"].startswith("sha256:") and "torch" in manifest["versions"]
    assert not (out / ".build").exists()
    index = Index(out)
    hits = index.search_hits([SENTENCES[4], SENTENCES[9]], 3)
    assert hits[0][0]["id"] == 4 and hits[0][0]["text"] == SENTENCES[4]  # a sentence finds itself
    assert hits[1][0]["id"] == 9 and len(hits[1]) == 3
    assert hits[0][0]["score"] == numerics.close(1.0, depth=numerics.TINY_MODEL)  # cos(v, v)
    # exact search equals a numpy brute force over the encoder's vectors
    vecs = index.encoder.encode(SENTENCES)
    q = index.encoder.encode(SENTENCES[:5])
    scores, ids = index.search(SENTENCES[:5], 10)
    brute = q @ vecs.T
    numerics.assert_close(scores, -np.sort(-brute, axis=1)[:, :10], depth=32)  # the same top-10 scores
    numerics.assert_close(np.take_along_axis(brute, ids, axis=1), scores, depth=32)  # for these ids


def test_rebuild_is_a_no_op_and_other_settings_are_refused(corpus_txt, tmp_path, tiny_bert, capsys):
    cfg = _dense_cfg(corpus_txt, tmp_path / "idx", tiny_bert)
    build_index(cfg)
    mtime = (tmp_path / "idx" / "index.faiss").stat().st_mtime_ns
    build_index(cfg)
    assert "up to date" in capsys.readouterr().out
    assert (tmp_path / "idx" / "index.faiss").stat().st_mtime_ns == mtime
    cfg.dense.pooler = "mean"
    with pytest.raises(StaleArtifactError, match="other settings.*--overwrite"):
        build_index(cfg)
    cfg.overwrite = True
    build_index(cfg)
    assert json.loads((tmp_path / "idx" / "manifest.json").read_text())["pooler"] == "mean"


def test_killed_build_resumes_to_identical_index(corpus_txt, tmp_path, tiny_bert, monkeypatch):
    reference = build_index(_dense_cfg(corpus_txt, tmp_path / "ref", tiny_bert))
    calls = {"n": 0}
    real_encode = encoder_mod.DenseEncoder.encode

    def dying_encode(self, texts, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # killed while encoding the second shard
        return real_encode(self, texts, **kw)

    monkeypatch.setattr(encoder_mod.DenseEncoder, "encode", dying_encode)
    cfg = _dense_cfg(corpus_txt, tmp_path / "idx", tiny_bert)
    with pytest.raises(KeyboardInterrupt):
        build_index(cfg)
    assert not (tmp_path / "idx" / "manifest.json").exists()
    with pytest.raises(IncompleteArtifactError, match="never finished"):
        Index(tmp_path / "idx")
    assert sorted(p.name for p in (tmp_path / "idx" / ".build").glob("emb_*.npy")) == ["emb_00000.npy"]
    calls["n"] = 10  # no more deaths
    build_index(cfg)
    assert calls["n"] == 12  # only the two unfinished shards were encoded again
    assert (tmp_path / "idx" / "index.faiss").read_bytes() == (reference / "index.faiss").read_bytes()


def test_other_encoder_or_corpus_is_refused(corpus_txt, tmp_path, tiny_bert, tiny_bert_other):
    out = build_index(_dense_cfg(corpus_txt, tmp_path / "idx", tiny_bert))
    with pytest.raises(StaleArtifactError, match="not the one index .* was built with"):
        Index(out, encoder=str(tiny_bert_other))
    Index(out, encoder=str(tiny_bert), corpus=CorpusSource(str(corpus_txt)))  # the right ones pass
    other = tmp_path / "other.txt"
    other.write_text("a different corpus\n")
    with pytest.raises(StaleArtifactError, match="does not match index"):
        Index(out, corpus=CorpusSource(str(other)))


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupted_index_file_is_refused(corpus_txt, tmp_path, tiny_bert, damage):
    out = build_index(_dense_cfg(corpus_txt, tmp_path / "idx", tiny_bert))
    path = out / "index.faiss"
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        path.write_bytes(bytes(data[:-100]))
        match = "truncated"
    else:
        data[-20] ^= 0xFF
        path.write_bytes(bytes(data))
        match = "corrupted"
    with pytest.raises(IncompleteArtifactError, match=f"index.faiss.*{match}"):
        Index(out)


def test_bm25_index_via_cli(corpus_txt, tmp_path, capsys):
    out = tmp_path / "bm25"
    assert main(["build-index", "--corpus", str(corpus_txt), "--retriever", "bm25", "--out", str(out)]) == 0
    assert main(["search", "--index", str(out), "--query", "The moon orbits the planet", "-k", "2",
                 "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines() if x.startswith("{")]
    assert [x["rank"] for x in lines] == [1, 2]
    assert lines[0]["id"] == 1 and lines[0]["text"] == SENTENCES[1] and lines[0]["score"] > lines[1]["score"]


def test_cli_dense_search_prints_rank_id_score_text(corpus_txt, tmp_path, tiny_bert, capsys):
    out = tmp_path / "d"
    assert main(["build-index", "--corpus", str(corpus_txt), "--encoder", str(tiny_bert), "--pooler",
                 "cls_before_pooler", "--out", str(out), "dense.batch_size=3"]) == 0
    capsys.readouterr()
    assert main(["search", "--index", str(out), "--query", SENTENCES[2], "-k", "3"]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r.strip() and not r.startswith("query")]
    rank, cid, score, *text = rows[0].split()
    assert (rank, cid, " ".join(text)) == ("1", "2", SENTENCES[2]) and float(score) == pytest.approx(1, abs=1e-4)  # numerics: printed to 4 decimals


def test_cli_reports_bad_input_without_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("ok\n\n")
    assert main(["build-index", "--corpus", str(bad), "--retriever", "bm25", "--out", str(tmp_path / "o")]) == 2
    assert "bad.txt:2: blank" in capsys.readouterr().err
    assert not (tmp_path / "o" / "manifest.json").exists()
    assert main(["search", "--index", str(tmp_path / "nothing"), "--query", "x"]) == 2
    assert "field 'index': no such folder" in capsys.readouterr().err


# --- issue 53 (reliability round 4): index manifests validated on read; ivfpq on a corpus too small ---

def _edit_manifest(folder, change) -> None:
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def test_an_index_manifest_whose_pooler_differs_from_its_build_is_refused(corpus_txt, tmp_path, tiny_bert):
    """The query pooler comes from the manifest: an edited one would embed queries unlike the corpus, silently."""
    from pgra.core.errors import InputError

    out = build_index(_dense_cfg(corpus_txt, tmp_path / "idx", tiny_bert))
    _edit_manifest(out, lambda m: m.update(pooler="mean"))
    with pytest.raises(InputError, match="built with pooler 'cls'") as e:
        Index(out)
    assert e.value.field == "pooler" and e.value.path == str(out / "manifest.json")
    _edit_manifest(out, lambda m: m.pop("pooler"))
    with pytest.raises(InputError, match="records pooler None"):
        Index(out)


def test_an_index_manifest_naming_files_outside_its_folder_is_refused(corpus_txt, tmp_path, tiny_bert):
    from pgra.core.errors import InputError
    from pgra.storage.artifacts import file_record

    out = build_index(_dense_cfg(corpus_txt, tmp_path / "idx", tiny_bert, bounded_memory=True))
    secret = tmp_path / "secret.npy"
    np.save(secret, np.zeros((3, 32), dtype=np.float32))
    for name in ("../secret.npy", str(secret)):
        def point_out(m, name=name):
            m["files"][name] = file_record(secret)
            m["vectors"]["shards"][0] = name
        original = (out / "manifest.json").read_text()
        _edit_manifest(out, point_out)
        with pytest.raises(InputError, match="not inside its folder") as e:
            Index(out, verify=False)
        assert e.value.field == "files"
        (out / "manifest.json").write_text(original)
    _edit_manifest(out, lambda m: m["vectors"]["shards"].append("vectors/other.npy"))  # a shard not listed
    with pytest.raises(InputError, match="vectors.shards must name files the manifest lists"):
        Index(out)


def test_an_encoder_trained_for_one_pooler_is_refused_under_another(corpus_txt, tmp_path, tiny_bert):
    """A `pgra train-simcse` encoder records the pooler it learned (cls_before_pooler): an index built or read with
    another is refused, naming the field, before anything is written."""
    import shutil

    from pgra.core.errors import InputError
    from pgra.retrieval.base import recorded_encoder

    simcse = tmp_path / "simcse"
    shutil.copytree(tiny_bert, simcse)
    (simcse / "manifest.json").write_text(json.dumps({"kind": "simcse", "pooler": "cls_before_pooler"}))
    with pytest.raises(InputError, match="trained .* for pooler 'cls_before_pooler'") as e:
        build_index(_dense_cfg(corpus_txt, tmp_path / "idx", simcse))
    assert e.value.field == "dense.pooler" and not (tmp_path / "idx").exists()
    cfg = _dense_cfg(corpus_txt, tmp_path / "idx", simcse)
    cfg.dense.pooler = "cls_before_pooler"
    out = build_index(cfg)
    Index(out)
    # both records edited alike still disagree with what the encoder was trained for
    _edit_manifest(out, lambda m: (m.update(pooler="mean"), m["config"]["dense"].update(pooler="mean")))
    with pytest.raises(InputError, match="trained .* for pooler 'cls_before_pooler'"):
        Index(out)
    with pytest.raises(InputError, match="with pooler None"):  # a record without it: no caller's default instead
        recorded_encoder({"retriever": "dense", "encoder": str(tiny_bert)})
    assert recorded_encoder({"retriever": "dense", "encoder": "e", "pooler": "mean"}) == ("e", "mean")


@pytest.mark.parametrize("settings,field", [([], "dense.faiss.pq_nbits"),
                                            (["dense.faiss.pq_nbits=4", "dense.faiss.opq=true"], "dense.faiss.opq"),
                                            (["dense.faiss.train_size=100"], "dense.faiss.train_size"),
                                            (["dense.bounded_memory=true"], "dense.faiss.pq_nbits")])
def test_ivfpq_on_a_corpus_smaller_than_its_codebooks_is_one_error_line(corpus_txt, tmp_path, capsys, settings,
                                                                       field):
    """faiss's k-means needs a training vector per centroid (2^pq_nbits, 256 for OPQ's rotation): refused before
    the encoder loads or anything is written, naming the field and the minimum."""
    out = tmp_path / "idx"
    code = main(["build-index", "--corpus", str(corpus_txt), "--out", str(out), "--index-type", "ivfpq",
                 "--encoder", str(tmp_path / "no-such-encoder"), *settings])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err
    assert f"field '{field}'" in lines[0] and "at least 256" in lines[0]
    assert not out.exists()
