"""The helpers every stage shares: one implementation each, checked against brute force."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pgra.core.errors import IncompleteArtifactError, InputError, StaleArtifactError
from pgra.data.hfdata import MissingSplitError, open_hf_dataset
from pgra.lm.tokens import fit_text, pad_sequences
from pgra.rerank.prompt_guided.scoring import score_candidates
from pgra.storage.artifacts import read_manifest, write_manifest
from pgra.tasks import get_task, task_from_manifest
from tests import numerics


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("lengths", [[1], [3, 1, 4, 1, 5], [0, 2, 7], [6, 6, 6]])
def test_pad_sequences_equals_a_brute_force_loop(side, lengths):
    rng = np.random.default_rng(len(lengths))
    seqs = [rng.integers(1, 50, n).tolist() for n in lengths]
    ids, mask = pad_sequences(seqs, pad_id=-7, side=side)
    width = max(lengths)
    assert ids.shape == mask.shape == (len(seqs), width) and ids.dtype == torch.long
    for row, seq in enumerate(seqs):
        pad = [-7] * (width - len(seq))
        want = seq + pad if side == "right" else pad + seq
        ones = [1] * len(seq) + [0] * len(pad) if side == "right" else [0] * len(pad) + [1] * len(seq)
        assert ids[row].tolist() == want and mask[row].tolist() == ones
    wide, _ = pad_sequences(seqs, 0, side=side, width=width + 3)
    assert wide.shape[1] == width + 3
    with pytest.raises(ValueError, match="more than the width"):
        pad_sequences([[1, 2, 3]], 0, side=side, width=2)


class WordTokenizer:
    """Whitespace tokenizer: a token per word (ids = word positions in a growing vocabulary)."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.inverse: dict[int, str] = {}

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        ids = []
        for w in text.split():
            if w not in self.vocab:
                self.vocab[w] = len(self.vocab)
                self.inverse[self.vocab[w]] = w
            ids.append(self.vocab[w])
        return {"input_ids": ids}

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return " ".join(self.inverse[i] for i in ids)


def test_fit_text_cuts_only_the_text_and_keeps_the_longest_fit():
    tok = WordTokenizer()

    def build(t: str) -> list[int]:
        return tok(f"HEAD {t} CUE ANSWER")["input_ids"]

    text = " ".join(f"w{i}" for i in range(20))
    ids, fits = fit_text(tok, text, build, limit=100)
    assert fits and ids == build(text)  # fits: untouched
    for limit in (4, 5, 9, 22):
        ids, fits = fit_text(tok, text, build, limit)
        words = tok.decode(ids).split()
        assert fits and len(ids) == limit  # the longest cut that fits
        assert words[0] == "HEAD" and words[-2:] == ["CUE", "ANSWER"]
        assert words[1:-2] == text.split()[: limit - 3]
    ids, fits = fit_text(tok, text, build, limit=2)  # even the empty text does not fit
    assert not fits and tok.decode(ids) == "HEAD CUE ANSWER"
    ids, fits = fit_text(tok, text, build, limit=2, min_keep=1)
    assert not fits and tok.decode(ids) == "HEAD w0 CUE ANSWER"


def test_open_hf_dataset_reads_saved_datasets_and_names_missing_splits(tmp_path):
    import datasets

    ds = datasets.Dataset.from_dict({"text": ["a", "b"], "label": [0, 1]})
    ds.save_to_disk(str(tmp_path / "one"))
    datasets.DatasetDict({"train": ds, "test": ds.select([0])}).save_to_disk(str(tmp_path / "dict"))
    assert open_hf_dataset(tmp_path / "one", "train")["text"] == ["a", "b"]
    assert open_hf_dataset(tmp_path / "dict", "test")["text"] == ["a"]
    with pytest.raises(MissingSplitError, match=r"split 'dev' not found \(splits: \['train', 'test'\]\)"):
        open_hf_dataset(tmp_path / "dict", "dev")
    with pytest.raises(InputError):
        open_hf_dataset(tmp_path / "nothing-here", "train")


def test_read_manifest_checks_kinds(tmp_path):
    write_manifest(tmp_path / "cand", {"kind": "candidates"})
    assert read_manifest(tmp_path / "cand", "candidates")["kind"] == "candidates"
    assert read_manifest(tmp_path / "cand", ("reranked", "candidates"))["kind"] == "candidates"
    with pytest.raises(StaleArtifactError, match="'candidates' artifact, not a 'reranked' or a 'reader'"):
        read_manifest(tmp_path / "cand", ["reranked", "reader"])
    (tmp_path / "half").mkdir()
    with pytest.raises(IncompleteArtifactError, match="never finished"):
        read_manifest(tmp_path / "half", "index")


def test_task_from_manifest_refuses_another_task(tmp_path):
    from pgra.core.config import to_dict

    manifest = {"task": to_dict(get_task("sst2"))}
    assert task_from_manifest(manifest, "m.json").name == "sst2"
    assert task_from_manifest(manifest, "m.json", "SST-2").name == "sst2"
    with pytest.raises(StaleArtifactError, match="m.json holds data of task 'sst2', not 'trec'"):
        task_from_manifest(manifest, "m.json", "trec")


def test_score_candidates_equals_the_naive_formula():
    rng = np.random.default_rng(0)
    q = rng.normal(size=8).astype(np.float32)
    e = rng.normal(size=(13, 8)).astype(np.float32)
    e[5] = e[2]  # a tie keeps first-stage order
    order, probs = score_candidates(q, e, top_d=4)
    naive = [float(np.exp(e[j] @ q)) for j in range(13)]
    naive = [x / sum(naive) for x in naive]
    numerics.assert_close(probs, naive, depth=64)  # fp32 scores of 8 terms, exp, a sum of 13
    want = sorted(range(13), key=lambda j: (-round(naive[j], 12), j))[:4]
    assert order.tolist() == want and probs.sum() == numerics.close(1.0, depth=16)
    assert json.dumps([float(p) for p in probs])  # plain floats for the JSONL


def test_artifacts_get_the_permissions_of_the_umask(tmp_path):
    """A shared index must be readable by the team: no 0600 files from temporary-file renames."""
    import os
    import stat

    from pgra.storage.artifacts import atomic_dir, write_json

    old = os.umask(0o022)
    try:
        write_json(tmp_path / "a.json", {"x": 1})
        with atomic_dir(tmp_path / "d") as d:
            (d / "f").write_text("x")
        assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644
        assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o755
        os.umask(0o077)
        write_json(tmp_path / "b.json", {"x": 1})
        assert stat.S_IMODE((tmp_path / "b.json").stat().st_mode) == 0o600
    finally:
        os.umask(old)


@pytest.mark.parametrize("flags, capability, want", [
    ({"avx2", "avx512f"}, "AVX512", torch.float32), ({"avx512f", "avx512_bf16"}, "AVX512", torch.bfloat16),
    ({"amx_tile", "amx_bf16"}, "AVX512", torch.bfloat16), (set(), "AVX2", torch.float32),
    ({"avx512f", "avx512_bf16"}, "AVX2", torch.float32),  # torch held at AVX2 (ATEN_CPU_CAPABILITY=avx2): as without
    ({"avx512f", "avx512_bf16", "onednn:AVX512_CORE_VNNI"}, "AVX512", torch.float32)])  # oneDNN held below bf16
def test_bf16_if_native_picks_bf16_only_on_cpus_with_bf16_hardware(monkeypatch, flags, capability, want):
    from pgra.runtime import device

    isa = [f.split(":")[1] for f in flags if f.startswith("onednn:")]
    if isa:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", isa[0])
    else:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(device, "cpu_flags", lambda: flags)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    cpu = torch.device("cpu")
    assert device.resolve_dtype("bf16-if-native", cpu) == want
    assert device.resolve_dtype("auto", cpu) == device.resolve_dtype(None, cpu) == torch.float32  # auto stays fp32
    assert device.resolve_dtype("bf16", cpu) == torch.bfloat16 and device.resolve_dtype("fp32", cpu) == torch.float32


def test_cpu_flags_reads_this_machines_flags():
    from pathlib import Path

    from pgra.runtime.device import cpu_flags

    info = Path("/proc/cpuinfo")
    if not info.exists():
        assert cpu_flags() == set()
        return
    line = next(x for x in info.read_text().splitlines() if x.startswith("flags"))
    assert cpu_flags() == set(line.split(":", 1)[1].split())
