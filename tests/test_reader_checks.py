"""Checks a reader run makes before training: label words as the model's token ids, and the test split."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from pgra.cli import main
from pgra.core.config import to_dict
from pgra.core.errors import InputError
from pgra.reader.data import ReaderFormatter
from pgra.reader.fid import load_tokenizer
from pgra.storage.artifacts import write_manifest
from pgra.tasks import check_label_ids
from tests.conftest import TASK, one_error_line


@pytest.mark.parametrize(("words", "message"), [
    ({"sky": "🙂", "town": "🙃"}, "unknown token [UNK]"),  # both [UNK] in a BERT vocabulary
    ({"sky": "sun🙂", "town": "city"}, "unknown token [UNK]"),  # a word one of whose pieces is [UNK]
    ({"sky": "Sun", "town": "sun"}, "are the same tokens"),  # distinct strings, one lower-cased token
])
def test_reader_words_must_be_distinct_known_tokens(tiny_bert, words, message):
    task = replace(TASK, reader_words=words)
    with pytest.raises(InputError, match="field 'reader_words'") as e:
        ReaderFormatter(task, load_tokenizer(str(tiny_bert)), n_passages=1)
    assert message in str(e.value)
    for word in {w for w in words.values() if w not in ("city",)}:
        assert f"'{word}'" in str(e.value)


def test_t5_targets_are_checked_too(tiny_t5):
    """A T5-style target wraps the word in sentinels; a word outside the vocabulary is still <unk>."""
    with pytest.raises(InputError, match=r"field 'reader_words'.*'zebra'.*unknown token <unk>"):
        ReaderFormatter(replace(TASK, reader_words={"sky": "zebra", "town": "city"}), load_tokenizer(str(tiny_t5)), 1)
    ReaderFormatter(TASK, load_tokenizer(str(tiny_t5)), 1)  # sun / city: distinct known tokens


def test_demo_words_checked_for_the_icl_lm(tiny_bert):
    task = replace(TASK, demo_words={"sky": "🙂", "town": "🙃"})
    tok = load_tokenizer(str(tiny_bert))
    ids = [tok(" " + task.demo_words[lab], add_special_tokens=False)["input_ids"] for lab in task.labels]
    with pytest.raises(InputError, match=r"field 'demo_words'.*'🙂'"):
        check_label_ids(task, tok, ids, "demo_words", "lm")


def _data_with(tmp_path: Path, reranked: Path, **task_changes) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    for split in ("train", "dev", "test"):
        (d / f"{split}.jsonl").write_bytes((reranked / f"{split}.jsonl").read_bytes())
    write_manifest(d, {"kind": "reranked", "task": to_dict(replace(TASK, **task_changes))})
    return d


def test_train_refuses_label_words_of_one_token_before_the_model_loads(tmp_path, reranked, tiny_bert2bert_dropout,
                                                                       capsys):
    data = _data_with(tmp_path, reranked, reader_words={"sky": "🙂", "town": "🙃"})
    line = one_error_line(["train", "--data", str(data), "--out", str(tmp_path / "o"), "--model",
                            str(tiny_bert2bert_dropout), "--max-steps", "1", "--batch-size", "2"], capsys)
    assert "field 'reader_words'" in line and "'🙂'" in line and "'🙃'" in line
    assert not (tmp_path / "o" / "checkpoints").exists()


def test_train_refuses_a_test_split_the_data_lacks(tmp_path, reranked, tiny_t5, capsys):
    line = one_error_line(["train", "--data", str(reranked), "--out", str(tmp_path / "o"), "--model", str(tiny_t5),
                            "--max-steps", "1", "--batch-size", "4", "--test-split", "bogus"], capsys)
    assert "field 'test_split'" in line and "'bogus'" in line and "dev, test, train" in line
    assert not (tmp_path / "o").exists()
    # an empty test split trains without a test evaluation
    assert main(["train", "--data", str(reranked), "--out", str(tmp_path / "p"), "--model", str(tiny_t5),
                 "--max-steps", "1", "--batch-size", "4", "--n-passages", "1", "--max-length", "32", "test_split=",
                 "--no-show-progress"]) == 0
    metrics = json.loads((tmp_path / "p" / "metrics.json").read_text())
    assert list(metrics["results"]) == ["dev"]


# --- issue 53 (reliability round 4) ---

def test_fp16_without_a_gpu_is_refused_before_anything_is_written(tmp_path, reranked, tiny_t5, capsys, monkeypatch):
    """On a CPU accelerate ignores fp16 (the weights come out byte for byte an fp32 run's) while the run would record
    fp16: refused, naming the field; bf16 is the precision a CPU runs."""
    from pgra.runtime.training import check_mixed_precision

    monkeypatch.setattr("pgra.runtime.training.fp16_device_present", lambda: False)  # this machine as a CPU-only one
    line = one_error_line(["train", "--data", str(reranked), "--out", str(tmp_path / "o"), "--model", str(tiny_t5),
                           "--max-steps", "1", "--batch-size", "4", "mixed_precision=fp16"], capsys)
    assert "field 'mixed_precision'" in line and "needs a GPU" in line and "bf16" in line
    assert not (tmp_path / "o").exists()
    for fine in ("no", "bf16"):
        check_mixed_precision(fine)
    monkeypatch.setattr("pgra.runtime.training.fp16_device_present", lambda: True)
    check_mixed_precision("fp16")


def test_the_readers_max_grad_norm_reaches_deepspeed():
    """DeepSpeed clips gradients itself (accelerate's clip_grad_norm_ does nothing under it) from its config's
    gradient_clipping, which accelerate fills with 1.0 when it is `auto`: the reader's max_grad_norm goes there."""
    from accelerate.utils import DeepSpeedPlugin

    from pgra.reader.config import TrainConfig
    from pgra.reader.train import deepspeed_settings

    def plugin(**config):
        return DeepSpeedPlugin(hf_ds_config={"zero_optimization": {"stage": 2}, **config})

    auto = plugin(gradient_clipping="auto", train_micro_batch_size_per_gpu="auto")
    config = deepspeed_settings(auto, TrainConfig(max_grad_norm=0.25, batch_size=8), 3)
    assert config["gradient_clipping"] == 0.25 and config["train_micro_batch_size_per_gpu"] == 3
    auto.deepspeed_config_process(must_match=False, gradient_clipping=1.0)  # what accelerate's prepare fills in
    assert auto.deepspeed_config["gradient_clipping"] == 0.25
    # accelerate's own plugin (no config file): `auto` too; 0 = off reaches DeepSpeed as 0
    assert deepspeed_settings(DeepSpeedPlugin(zero_stage=2), TrainConfig(max_grad_norm=0.0), 1)["gradient_clipping"] == 0
    # a config file without the key would clip nothing: it gets the reader's value
    assert deepspeed_settings(plugin(), TrainConfig(max_grad_norm=2.0), 1)["gradient_clipping"] == 2.0
    assert deepspeed_settings(plugin(gradient_clipping=1), TrainConfig(max_grad_norm=1.0), 1)["gradient_clipping"] == 1
    with pytest.raises(InputError, match="gradient_clipping 0.5 and the reader max_grad_norm 1") as e:
        deepspeed_settings(plugin(gradient_clipping=0.5), TrainConfig(), 1)
    assert e.value.field == "max_grad_norm"
