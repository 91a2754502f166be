import json

import numpy as np
import pytest

from pgra.core.errors import IncompleteArtifactError, InputError
from pgra.data.corpus import CorpusSource, CorpusStore, build_store
from tests.conftest import SENTENCES


def test_txt_store_roundtrip(corpus_txt, tmp_path):
    store = build_store(CorpusSource(str(corpus_txt)), tmp_path / "store", show_progress=False)
    assert len(store) == len(SENTENCES)
    assert store.text(3) == SENTENCES[3]
    assert store.texts([5, 0, 5]) == [SENTENCES[5], SENTENCES[0], SENTENCES[5]]
    assert store.texts(np.arange(len(SENTENCES))) == SENTENCES
    assert store.external_ids([2, 7]) == [2, 7]  # id = 0-based line number
    assert not (tmp_path / "store" / "ids.json").exists()


def test_store_is_reused_when_source_unchanged(corpus_txt, tmp_path):
    build_store(CorpusSource(str(corpus_txt)), tmp_path / "s", show_progress=False)
    mtime = (tmp_path / "s" / "texts.bin").stat().st_mtime_ns
    build_store(CorpusSource(str(corpus_txt)), tmp_path / "s", show_progress=False)
    assert (tmp_path / "s" / "texts.bin").stat().st_mtime_ns == mtime
    corpus_txt.write_text("one sentence\nanother one\n")
    assert len(build_store(CorpusSource(str(corpus_txt)), tmp_path / "s", show_progress=False)) == 2


def test_unicode_texts(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("Café au lait — naïve.\n東京は日本の首都です。\nemoji 🌍 here\n", encoding="utf-8")
    store = build_store(CorpusSource(str(p)), tmp_path / "s", show_progress=False)
    assert store.texts([1, 2, 0]) == ["東京は日本の首都です。", "emoji 🌍 here", "Café au lait — naïve."]


@pytest.mark.parametrize("content, line", [("a\n\nb\n", 2), ("a\n   \nb\n", 2), ("a\nb\n\t\n", 3)])
def test_blank_line_names_file_and_line(tmp_path, content, line):
    p = tmp_path / "c.txt"
    p.write_text(content)
    with pytest.raises(InputError, match=rf"c\.txt:{line}: blank"):
        build_store(CorpusSource(str(p)), tmp_path / "s", show_progress=False)
    assert not (tmp_path / "s").exists()  # nothing half-written left looking complete


def test_skip_blank_lines_keeps_line_numbers(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("a\n\nb\n")
    store = build_store(CorpusSource(str(p), skip_blank_lines=True), tmp_path / "s", show_progress=False)
    assert store.texts([0, 1]) == ["a", "b"] and store.external_ids([0, 1]) == [0, 2]


def test_undecodable_bytes(tmp_path):
    p = tmp_path / "c.txt"
    p.write_bytes(b"fine\nbad \xff\xfe bytes\n")
    with pytest.raises(InputError, match=r"c\.txt:2: undecodable"):
        build_store(CorpusSource(str(p)), tmp_path / "s", show_progress=False)


def test_empty_and_missing_corpus(tmp_path):
    p = tmp_path / "empty.txt"
    p.write_text("")
    with pytest.raises(InputError, match="empty corpus"):
        build_store(CorpusSource(str(p)), tmp_path / "s", show_progress=False)
    with pytest.raises(InputError, match="not found"):
        build_store(CorpusSource(str(tmp_path / "nope.txt")), tmp_path / "s", show_progress=False)


def test_jsonl_ids_and_errors(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in [{"id": "w1", "text": "alpha"}, {"id": "w9", "text": "beta"}]))
    store = build_store(CorpusSource(str(p)), tmp_path / "s", show_progress=False)
    assert store.external_ids([1, 0]) == ["w9", "w1"] and store.position("w9") == 1
    p.write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n')
    with pytest.raises(InputError, match=r"c\.jsonl:2 \(field 'id'\): duplicate"):
        build_store(CorpusSource(str(p)), tmp_path / "s2", show_progress=False)
    p.write_text('{"id": "a", "body": "x"}\n')
    with pytest.raises(InputError, match=r"c\.jsonl:1 \(field 'text'\): missing"):
        build_store(CorpusSource(str(p)), tmp_path / "s3", show_progress=False)
    p.write_text('{"id": "a", "text": "x"}\nnot json\n')
    with pytest.raises(InputError, match=r"c\.jsonl:2: not a JSON"):
        build_store(CorpusSource(str(p)), tmp_path / "s4", show_progress=False)


def test_hf_dataset_from_disk(tmp_path):
    import datasets

    ds = datasets.Dataset.from_dict({"sentence": ["x one", "y two", "z three"]})
    ds.save_to_disk(str(tmp_path / "ds"))
    src = CorpusSource(str(tmp_path / "ds"), format="hf", text_field="sentence")
    store = build_store(src, tmp_path / "s", show_progress=False)
    assert store.texts([2, 0]) == ["z three", "x one"]
    assert src.fingerprint().startswith("hf:")
    with pytest.raises(InputError, match="field 'text'"):
        build_store(CorpusSource(str(tmp_path / "ds"), format="hf"), tmp_path / "s2", show_progress=False)


def test_truncated_store_is_detected(corpus_txt, tmp_path):
    build_store(CorpusSource(str(corpus_txt)), tmp_path / "s", show_progress=False)
    data = (tmp_path / "s" / "texts.bin").read_bytes()
    (tmp_path / "s" / "texts.bin").write_bytes(data[:-10])
    with pytest.raises(IncompleteArtifactError, match="texts.bin.*truncated"):
        CorpusStore(tmp_path / "s")
