import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from pgra.cli import main
from pgra.core.errors import InputError
from pgra.reader import train as train_mod
from pgra.reader.data import ReaderFormatter
from pgra.reader.fid import FiDReader, load_tokenizer
from pgra.reader.train import TrainConfig, train
from tests import numerics
from tests.conftest import SENTENCES, TASK, _records, copy_in_dtype, launch_failure
from tests.numerics import assert_close, close

ROOT = Path(__file__).resolve().parents[1]
def test_fid_with_one_passage_equals_the_plain_model(tiny_t5):
    tok = load_tokenizer(str(tiny_t5))
    reader = FiDReader.from_pretrained(str(tiny_t5)).eval()
    fmt = ReaderFormatter(TASK, tok, n_passages=0)
    batch = fmt.collate(_records(3))
    assert batch["input_ids"].shape[1] == 1
    fid = reader(batch["input_ids"], batch["attention_mask"], labels=batch["labels"]).loss
    plain = reader.model(input_ids=batch["input_ids"][:, 0], attention_mask=batch["attention_mask"][:, 0],
                         labels=batch["labels"]).loss
    assert_close(fid, plain, depth=numerics.TINY_SEQ2SEQ)  # one passage: the FiD path is the plain model's


def test_fid_encodes_passages_independently(tiny_t5):
    tok = load_tokenizer(str(tiny_t5))
    reader = FiDReader.from_pretrained(str(tiny_t5)).eval()
    batch = ReaderFormatter(TASK, tok, n_passages=3).collate(_records(2))
    enc, mask = reader.encode(batch["input_ids"], batch["attention_mask"])
    length = batch["input_ids"].shape[2]
    for p in range(3):
        alone = reader.model.get_encoder()(input_ids=batch["input_ids"][:, p],
                                           attention_mask=batch["attention_mask"][:, p]).last_hidden_state
        assert_close(enc.last_hidden_state[:, p * length:(p + 1) * length], alone, depth=numerics.TINY_SEQ2SEQ)
    assert mask.shape == (2, 3 * length)


def test_label_scoring_equals_per_label_likelihood(tiny_t5):
    tok = load_tokenizer(str(tiny_t5))
    reader = FiDReader.from_pretrained(str(tiny_t5)).eval()
    fmt = ReaderFormatter(TASK, tok, n_passages=2)
    batch = fmt.collate(_records(3))
    scores = reader.score_targets(batch["input_ids"], batch["attention_mask"], fmt.target_tensor, fmt.target_mask)
    for c, target in enumerate(fmt.targets):
        labels = torch.as_tensor([target] * 3)
        loss = reader(batch["input_ids"], batch["attention_mask"], labels=labels).loss
        assert_close(scores[:, c].mean(), -loss * len(target), depth=numerics.TINY_SEQ2SEQ)


def test_inputs_targets_and_truncation(tiny_t5):
    tok = load_tokenizer(str(tiny_t5))
    fmt = ReaderFormatter(TASK, tok, n_passages=2, max_length=20)
    assert tok.convert_ids_to_tokens(fmt.targets[0]) == ["<extra_id_0>", "sun", "<extra_id_1>", "</s>"]
    long_ev = " ".join(SENTENCES[:4])
    ids = fmt.passage_ids(SENTENCES[1], long_ev)
    text = tok.decode(ids)
    assert len(ids) <= 20 and "<extra_id_0>" in text and text.endswith(". </s>")
    assert "The moon orbits the planet once a month" in text  # the query survives, evidence is cut
    long_query = " ".join(SENTENCES[:6])
    ids = fmt.passage_ids(long_query, "")
    assert len(ids) <= 20 and "<extra_id_0>" in tok.decode(ids)
    rec = {"id": "x", "text": "The sun .", "label": "sky", "ctxs": [{"id": 1, "text": "The moon ."}]}
    with pytest.warns(UserWarning, match="fewer than d=2"):
        batch = fmt.collate([rec])
    assert batch["input_ids"].shape[:2] == (1, 2)


def test_train_predict_and_artifacts(reranked, tmp_path, tiny_t5):
    cfg = TrainConfig(data=str(reranked), out=str(tmp_path / "run"), model=str(tiny_t5), n_passages=2,
                      max_length=48, batch_size=4, max_steps=6, eval_every=3, learning_rate=1e-3,
                      show_progress=False)
    results = train(cfg)
    out = tmp_path / "run"
    assert set(results) == {"dev", "test"} and 0 <= results["test"]["accuracy"] <= 1
    assert (out / "best" / "model.safetensors").exists() and (out / "best" / "fid_config.json").exists()
    log = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3, 4, 5, 6] and "dev_accuracy" in log[2]
    preds = [json.loads(x) for x in (out / "predictions_test.jsonl").read_text().splitlines()]
    assert all(p["prediction"] in ("sky", "town") for p in preds)  # label scoring: always a valid label
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "reader" and manifest["steps"] == 6
    cfg_gen = TrainConfig(**{**cfg.__dict__, "out": str(tmp_path / "gen"), "predict_mode": "generate",
                             "max_steps": 2, "eval_every": 0})
    res = train(cfg_gen)
    gen = [json.loads(x)["prediction"] for x in (tmp_path / "gen" / "predictions_test.jsonl").read_text().splitlines()]
    assert len(gen) == 6 and all(p in ("sky", "town", None) for p in gen)
    assert res["test"]["invalid_predictions"] == gen.count(None)  # generation may name no label: counted


def test_a_bf16_checkpoint_trains_with_fp32_weights(reranked, tmp_path, tiny_t5):
    """transformers 5 keeps a checkpoint's dtype: a bf16 reader checkpoint still trains with fp32 master weights."""
    from safetensors.torch import load_file

    half = copy_in_dtype(tiny_t5, tmp_path / "bf16", "bfloat16")
    cfg = TrainConfig(data=str(reranked), out=str(tmp_path / "run"), model=str(half), n_passages=2,
                      max_length=48, batch_size=4, max_steps=2, eval_every=0, learning_rate=1e-3,
                      show_progress=False)
    train(cfg)
    weights = load_file(tmp_path / "run" / "best" / "model.safetensors")
    assert {v.dtype for v in weights.values()} == {torch.float32}


def _die_after_first_checkpoint(monkeypatch) -> None:
    """Make training raise KeyboardInterrupt right after its first resumable checkpoint is complete."""
    real = train_mod.save_checkpoint
    calls = {"n": 0}

    def dying_checkpoint(*args, **kwargs):
        real(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(train_mod, "save_checkpoint", dying_checkpoint)


def test_killed_training_resumes_to_the_same_weights(reranked, tmp_path, tiny_t5, monkeypatch):
    base = dict(data=str(reranked), model=str(tiny_t5), n_passages=2, max_length=48, batch_size=4, max_steps=7,
                eval_every=0, save_every=3, learning_rate=1e-3, show_progress=False)
    train(TrainConfig(out=str(tmp_path / "a"), **base))
    _die_after_first_checkpoint(monkeypatch)  # killed right after the step-3 checkpoint (mid-epoch: 4 batches/epoch)
    with pytest.raises(KeyboardInterrupt):
        train(TrainConfig(out=str(tmp_path / "b"), **base))
    assert not (tmp_path / "b" / "manifest.json").exists()
    train(TrainConfig(out=str(tmp_path / "b"), **base))
    a = load_file(str(tmp_path / "a" / "best" / "model.safetensors"))
    b = load_file(str(tmp_path / "b" / "best" / "model.safetensors"))
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=0, rtol=0)  # exact: one machine, the same batches and kernels
    la = [json.loads(x)["loss"] for x in (tmp_path / "a" / "train_log.jsonl").read_text().splitlines()]
    lb = [json.loads(x)["loss"] for x in (tmp_path / "b" / "train_log.jsonl").read_text().splitlines()]
    assert la == lb
    with pytest.raises(InputError, match="another config"):
        train(TrainConfig(out=str(tmp_path / "b"), **{**base, "learning_rate": 5e-4}))


def test_bad_reader_inputs(reranked, tmp_path, tiny_t5, tiny_opt, capsys):
    with pytest.raises(InputError, match="is not an encoder-decoder|cannot load the encoder-decoder"):
        train(TrainConfig(data=str(reranked), out=str(tmp_path / "x"), model=str(tiny_opt), show_progress=False))
    assert main(["train", "--data", str(reranked), "--out", str(tmp_path / "y"), "--model", str(tiny_t5),
                 "max_step=3"]) == 2
    assert "Did you mean: max_steps" in capsys.readouterr().err
    bad = reranked / "dev.jsonl"
    rec = _records(1)[0]
    rec["label"] = "ocean"
    bad.write_text(json.dumps(rec) + "\n")
    with pytest.raises(InputError, match=r"dev\.jsonl:1 \(field 'label'\): unknown label 'ocean'"):
        train(TrainConfig(data=str(reranked), out=str(tmp_path / "z"), model=str(tiny_t5), max_steps=1,
                          batch_size=4, show_progress=False))


@pytest.mark.distributed
@pytest.mark.parametrize("arch", ["t5", "bert2bert", "bert2bert-frozen", "bert2bert-top1"])
def test_two_process_ddp_losses_match_single_process(reranked, tmp_path, arch, request):
    model = request.getfixturevalue("tiny_t5" if arch == "t5" else "tiny_bert2bert")
    # the label words are one token each in both tiny vocabularies: equal target lengths make the mean of the
    # two processes' token-mean losses equal the single process's token-mean loss
    args = ["--data", str(reranked), "--model", str(model), "--n-passages", "2", "--batch-size", "4",
            "--max-steps", "4", "--eval-every", "0", "--learning-rate", "1e-3", "max_length=48"]
    if arch.endswith("frozen"):  # each process reads its share of the stored encoder outputs
        args.append("freeze_encoder=true")
    if arch.endswith("top1"):  # the top encoder layer trains under DDP on the stored states of the lower one
        args.append("train_top_layers=1")
    assert main(["train", "--out", str(tmp_path / "single"), *args]) == 0
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "scripts" / "train.py"), "--out", str(tmp_path / "ddp"), *args]
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, launch_failure(proc)
    single = [json.loads(x)["loss"] for x in (tmp_path / "single" / "train_log.jsonl").read_text().splitlines()]
    ddp = [json.loads(x)["loss"] for x in (tmp_path / "ddp" / "train_log.jsonl").read_text().splitlines()]
    assert len(ddp) == 4
    assert ddp == numerics.close(single, depth=numerics.trained(4, numerics.TINY_SEQ2SEQ))


def test_gradient_checkpointing_and_accumulation_keep_the_loss(reranked, tmp_path, tiny_t5):
    base = dict(data=str(reranked), model=str(tiny_t5), n_passages=2, max_length=48, batch_size=4, max_steps=2,
                eval_every=0, learning_rate=1e-3, show_progress=False)
    train(TrainConfig(out=str(tmp_path / "plain"), **base))
    train(TrainConfig(out=str(tmp_path / "ckpt"), gradient_checkpointing=True, **base))
    log = lambda name: [json.loads(x)["loss"] for x in (tmp_path / name / "train_log.jsonl").read_text().splitlines()]  # noqa: E731
    assert log("plain") == close(log("ckpt"), depth=numerics.trained(2, numerics.TINY_SEQ2SEQ))


@pytest.mark.distributed
@pytest.mark.parametrize("zero", [2, 3])
def test_deepspeed_smoke_one_cpu_process(reranked, tmp_path, tiny_t5, zero, torch_extensions_unlocked):
    """`accelerate launch` with the shipped ZeRO-2/3 configs, one CPU process: same losses as plain training."""
    pytest.importorskip("deepspeed", reason="the deepspeed extra is installed by `make test`")
    args = ["--data", str(reranked), "--model", str(tiny_t5), "--n-passages", "2", "--batch-size", "4",
            "--max-steps", "3", "--eval-every", "3", "--learning-rate", "1e-3", "max_length=48"]
    assert main(["train", "--out", str(tmp_path / "plain"), *args]) == 0
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(ROOT / "configs" / "accelerate" / f"deepspeed_zero{zero}.yaml"), "--num_processes", "1",
           str(ROOT / "scripts" / "train.py"), "--out", str(tmp_path / "ds"), *args]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, launch_failure(proc)
    plain = [json.loads(x)["loss"] for x in (tmp_path / "plain" / "train_log.jsonl").read_text().splitlines()]
    ds = [json.loads(x)["loss"] for x in (tmp_path / "ds" / "train_log.jsonl").read_text().splitlines()]
    assert len(ds) == 3 and ds == numerics.close(plain, depth=numerics.trained(3, numerics.TINY_SEQ2SEQ))
    assert (tmp_path / "ds" / "best" / "model.safetensors").exists()
    assert json.loads((tmp_path / "ds" / "metrics.json").read_text())["results"]["test"]["examples"] == 6


def test_early_stopping_when_dev_stops_improving(reranked, tmp_path, tiny_t5):
    # learning rate 0: the dev metric can never improve after the first evaluation
    train(TrainConfig(data=str(reranked), out=str(tmp_path / "es"), model=str(tiny_t5), n_passages=1, max_length=48,
                      batch_size=4, max_steps=10, eval_every=1, early_stopping_patience=2, learning_rate=0.0,
                      show_progress=False))
    manifest = json.loads((tmp_path / "es" / "manifest.json").read_text())
    assert manifest["steps"] == 3 and manifest["best_step"] == 1


def test_every_parameter_of_a_bert2bert_reader_gets_a_gradient(tiny_bert2bert):
    """DDP refuses parameters the loss never reaches: an EncoderDecoderModel's encoder pooler is dropped."""
    tok = load_tokenizer(str(tiny_bert2bert))
    reader = FiDReader.from_pretrained(str(tiny_bert2bert))  # the pooler comes back on load; FiD drops it
    batch = ReaderFormatter(TASK, tok, n_passages=2, max_length=48).collate(_records(2))
    reader(batch["input_ids"], batch["attention_mask"], labels=batch["labels"]).loss.backward()
    assert [n for n, p in reader.named_parameters() if p.grad is None] == []


def test_reader_load_predicts_what_the_run_saved(reranked, tmp_path, tiny_t5):
    from pgra.reader.predict import Reader

    out = tmp_path / "run"
    train(TrainConfig(data=str(reranked), out=str(out), model=str(tiny_t5), n_passages=2, max_length=48,
                      batch_size=4, max_steps=4, eval_every=2, learning_rate=1e-3, show_progress=False,
                      eval_batch_size=2))  # several evaluation batches under accelerate's autocast
    saved = [json.loads(x) for x in (out / "predictions_test.jsonl").read_text().splitlines()]
    records = [json.loads(x) for x in (reranked / "test.jsonl").read_text().splitlines()]
    for folder in (out, out / "best"):
        reader = Reader.load(folder)
        assert reader.task.name == "sky" and reader.formatter.n_passages == 2
        got = reader.predict(records, batch_size=5)
        assert [g["prediction"] for g in got] == [s["prediction"] for s in saved]
        for g, s in zip(got, saved, strict=True):
            assert set(g["scores"]) == {"sky", "town"} and sum(g["scores"].values()) == numerics.close(1.0, depth=4)
            assert g["scores"] == {lab: close(p, depth=numerics.TINY_SEQ2SEQ, scale=1) for lab, p in s["scores"].items()}
    with pytest.raises(InputError, match="not a trained `pgra train` run"):
        Reader.load(tmp_path)


@pytest.mark.parametrize("top_layers", [0, 1])
@pytest.mark.parametrize("arch", ["t5", "bert2bert"])
def test_stored_encoder_outputs_score_like_the_encoder(arch, top_layers, request):
    """freeze_encoder's stored outputs (records padded one by one, batched in another order) give the scores and
    loss that running the encoder on the padded batch gives; so do train_top_layers' stored states of the lower
    layers with the top layer run on them."""
    from pgra.reader.encoded import EncodedInputs

    model = request.getfixturevalue("tiny_t5" if arch == "t5" else "tiny_bert2bert")
    reader = FiDReader.from_pretrained(str(model))
    reader.freeze_encoder(top_layers)
    reader.eval()
    fmt = ReaderFormatter(TASK, load_tokenizer(str(model)), n_passages=2, max_length=48)
    records = _records(7)
    encoded = EncodedInputs.compute(reader, fmt, records, batch_size=3)  # 3 batches, the last of one record
    batch = fmt.collate(records)
    direct = reader.score_targets(batch["input_ids"], batch["attention_mask"], fmt.target_tensor, fmt.target_mask)
    states, mask = encoded.passages(range(7))
    enc, fused = reader.encode_stored(states, mask)
    stored = reader.score_encoded(enc.last_hidden_state, fused, fmt.target_tensor, fmt.target_mask)
    assert_close(stored, direct, depth=numerics.TINY_SEQ2SEQ)
    order = [5, 0, 3]
    states, mask = encoded.passages(order)
    labels = fmt.label_batch([records[i] for i in order])["labels"]
    sub = fmt.collate([records[i] for i in order])
    assert_close(reader(attention_mask=mask, labels=labels, stored_states=states).loss,
                 reader(sub["input_ids"], sub["attention_mask"], labels=labels).loss, depth=numerics.TINY_SEQ2SEQ)


@pytest.mark.parametrize("arch", ["t5", "bert2bert"])
def test_encoder_split_equals_the_whole_encoder(arch, request):
    """Each architecture's split: the top ``L - k`` layers run on the bottom ``k`` layers' states return the whole
    encoder's states, for every k (the same modules run the same kernels on the same tensors: equal bits)."""
    from pgra.reader.split import encoder_split

    model = request.getfixturevalue("tiny_t5" if arch == "t5" else "tiny_bert2bert")
    reader = FiDReader.from_pretrained(str(model)).eval()
    batch = ReaderFormatter(TASK, load_tokenizer(str(model)), n_passages=2, max_length=48).collate(_records(5))
    ids, mask = batch["input_ids"].flatten(0, 1), batch["attention_mask"].flatten(0, 1)
    encoder = reader.model.get_encoder()
    whole = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    split = encoder_split(encoder)
    assert len(split.layers(encoder)) == 2
    for k in range(3):
        got = split.top(encoder, split.bottom(encoder, ids, mask, k), mask, k)
        assert torch.equal(got[mask.bool()], whole[mask.bool()]), k


def test_frozen_encoder_trains_the_decoder_only(reranked, tmp_path, tiny_bert2bert):
    base = dict(data=str(reranked), model=str(tiny_bert2bert), n_passages=2, max_length=48, batch_size=4,
                max_steps=6, eval_every=3, learning_rate=1e-3, show_progress=False, freeze_encoder=True)
    train(TrainConfig(out=str(tmp_path / "run"), **base))
    before = load_file(str(tiny_bert2bert / "model.safetensors"))
    after = load_file(str(tmp_path / "run" / "best" / "model.safetensors"))
    enc = [k for k in after if k.startswith("encoder.") and k in before]
    dec = [k for k in after if k.startswith("decoder.") and k in before]
    assert enc and dec
    assert all(torch.equal(before[k], after[k]) for k in enc)
    assert any(not torch.equal(before[k], after[k]) for k in dec)
    # the dev score during training (stored encoder outputs) is the final evaluation's (the encoder run anew)
    log = [json.loads(x) for x in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    best = next(r for r in log if r["step"] == metrics["best_step"])
    assert best["dev_accuracy"] == metrics["results"]["dev"]["accuracy"]


@pytest.mark.parametrize("frozen", [{"freeze_encoder": True}, {"train_top_layers": 1}])
def test_killed_frozen_encoder_training_resumes_to_the_same_weights(reranked, tmp_path, tiny_t5, monkeypatch, frozen):
    # train_top_layers: the top layer trains with dropout on (each batch's masks come from its own seed)
    model = _with_dropout(tiny_t5, tmp_path / "model") if "train_top_layers" in frozen else tiny_t5
    base = dict(data=str(reranked), model=str(model), n_passages=2, max_length=48, batch_size=4, max_steps=7,
                eval_every=0, save_every=3, learning_rate=1e-3, show_progress=False, **frozen)
    train(TrainConfig(out=str(tmp_path / "a"), **base))
    _die_after_first_checkpoint(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        train(TrainConfig(out=str(tmp_path / "b"), **base))
    train(TrainConfig(out=str(tmp_path / "b"), **base))
    a = (tmp_path / "a" / "best" / "model.safetensors").read_bytes()
    assert a == (tmp_path / "b" / "best" / "model.safetensors").read_bytes()
    la = (tmp_path / "a" / "train_log.jsonl").read_text()
    assert la == (tmp_path / "b" / "train_log.jsonl").read_text()


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "best" / "model.safetensors"))


def test_train_top_layers_at_its_ends_is_freeze_encoder_and_the_unfrozen_reader(reranked, tmp_path,
                                                                               tiny_bert2bert_dropout):
    """train_top_layers=0 is freeze_encoder=true; train_top_layers = the encoder's layer count (2) is the reader with
    every weight trained. Both pairs run the same code on the same tensors (the same stored states; the same
    whole-model forward), so their losses and weights are equal bit for bit, whatever the CPU's kernels (the
    tolerance is 0; checked under ATEN_CPU_CAPABILITY=avx2 too). Dropout is on: the top ends of the encoder train
    with it."""
    from pgra.core.config import result_settings, to_dict

    base = dict(data=str(reranked), model=str(tiny_bert2bert_dropout), n_passages=2, max_length=48, batch_size=4,
                max_steps=3, eval_every=2, learning_rate=1e-3, show_progress=False, test_split="")
    for name, extra in (("frozen", {"freeze_encoder": True}), ("top0", {"train_top_layers": 0}),
                        ("full", {}), ("top2", {"train_top_layers": 2})):
        train(TrainConfig(out=str(tmp_path / name), **base, **extra))
    assert _losses(tmp_path / "top0") == _losses(tmp_path / "frozen")
    assert _losses(tmp_path / "top2") == _losses(tmp_path / "full") != _losses(tmp_path / "frozen")
    for a, b in (("top0", "frozen"), ("top2", "full")):
        wa, wb = _weights(tmp_path / a), _weights(tmp_path / b)
        assert all(torch.equal(wa[k], wb[k]) for k in wa), (a, b)
    init = load_file(str(tiny_bert2bert_dropout / "model.safetensors"))
    words = "encoder.embeddings.word_embeddings.weight"
    assert not torch.equal(_weights(tmp_path / "top2")[words], init[words])  # the whole reader trained
    # unset, the option is left out of every key and recorded config: today's freeze_encoder runs keep theirs
    assert "train_top_layers" not in result_settings(TrainConfig(freeze_encoder=True))
    assert "train_top_layers" not in to_dict(TrainConfig(freeze_encoder=True))
    assert "train_top_layers" not in json.loads((tmp_path / "frozen" / "manifest.json").read_text())["config"]
    assert json.loads((tmp_path / "top0" / "manifest.json").read_text())["config"]["train_top_layers"] == 0


def test_train_top_layers_trains_the_top_layers_on_states_stored_once(reranked, tmp_path, tiny_bert2bert_dropout,
                                                                     monkeypatch):
    """train_top_layers=1 of 2: the lower encoder layer and the word embeddings keep their weights, the top layer and
    the decoder's change; the lower layer runs once per (input, evidence) pair over three epochs (train and dev
    encoded once; the final evaluation loads best/ anew), the top layer at every step and dev evaluation."""
    rows = {0: 0, 1: 0}  # the (input, evidence) pairs through each encoder layer of the reader that trains
    real, loaded = train_mod.FiDReader.from_pretrained, []

    def counted(*args, **kwargs):
        reader = real(*args, **kwargs)
        if not loaded:  # the first load is the reader that trains; the final evaluation loads best/
            for i, layer in enumerate(reader.model.get_encoder().encoder.layer):
                layer.register_forward_hook(lambda m, a, out, i=i: rows.__setitem__(i, rows[i] + a[0].shape[0]))
        loaded.append(reader)
        return reader

    monkeypatch.setattr(train_mod.FiDReader, "from_pretrained", counted)
    out = tmp_path / "run"
    cfg = TrainConfig(data=str(reranked), out=str(out), model=str(tiny_bert2bert_dropout), n_passages=2,
                      max_length=48, batch_size=4, max_steps=12, eval_every=4, learning_rate=1e-3,
                      show_progress=False, train_top_layers=1, eval_batch_size=5)
    from pgra.runtime.cost import metered

    with metered() as cost:
        train(cfg)
    n_train, n_dev = (len((reranked / f"{s}.jsonl").read_text().splitlines()) for s in ("train", "dev"))
    assert cfg.max_steps * cfg.batch_size == 3 * n_train  # three epochs
    assert rows[0] == (n_train + n_dev) * 2  # each input's 2 passages through the lower layer once
    assert rows[1] == (cfg.max_steps * cfg.batch_size + 3 * n_dev) * 2  # every step and dev evaluation
    init = load_file(str(tiny_bert2bert_dropout / "model.safetensors"))
    after = _weights(out)
    lower = [k for k in init if k.startswith(("encoder.encoder.layer.0.", "encoder.embeddings."))]
    upper = [k for k in init if k.startswith("encoder.encoder.layer.1.")]
    decoder = [k for k in init if k.startswith("decoder.bert.encoder.")]
    assert lower and upper and decoder
    assert all(torch.equal(init[k], after[k]) for k in lower)
    assert all(not torch.equal(init[k], after[k]) for k in upper if k.endswith(".weight"))
    # the cost record prices the trained top layer by its own parameters, not the whole model's
    top = next(w for w in cost["work"] if w["part"] == "encoder top layers")
    assert top["parameters"] == sum(init[k].numel() for k in upper) and top["mode"] == "trained"
    assert any(not torch.equal(init[k], after[k]) for k in decoder)
    # the dev score during training (stored lower states, the top layer run on them) is the final evaluation's
    log = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    metrics = json.loads((out / "metrics.json").read_text())
    best = next(r for r in log if r["step"] == metrics["best_step"])
    assert best["dev_accuracy"] == metrics["results"]["dev"]["accuracy"]


def test_train_top_layers_refuses_what_it_cannot_do(reranked, tmp_path, tiny_t5, capsys):
    args = ["train", "--data", str(reranked), "--model", str(tiny_t5), "--max-steps", "1", "--batch-size", "4",
            "--no-show-progress"]
    assert main([*args, "--out", str(tmp_path / "a"), "train_top_layers=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "field 'train_top_layers'" in err[0]
    assert "has 2 encoder layers" in err[0]
    with pytest.raises(InputError, match="set one of them"):
        train(TrainConfig(data=str(reranked), out=str(tmp_path / "b"), model=str(tiny_t5), max_steps=1,
                          batch_size=4, show_progress=False, freeze_encoder=True, train_top_layers=1))


def test_reader_folders_follow_the_umask_and_refuse_other_artifacts(reranked, tmp_path, tiny_t5):
    old = os.umask(0o022)
    try:
        out = tmp_path / "run"
        train(TrainConfig(data=str(reranked), out=str(out), model=str(tiny_t5), n_passages=2, max_length=48,
                          batch_size=4, max_steps=2, save_every=1, eval_every=0, show_progress=False,
                          keep_resume_state=True))  # the checkpoints' files too
    finally:
        os.umask(old)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any("checkpoints" in p.parts for p in files) and (out / "best" / "model.safetensors") in files
    assert {oct(p.stat().st_mode & 0o777) for p in files} == {oct(0o644)}
    # the Python API refuses an output folder holding another stage's artifact (here: the reranked inputs' copy)
    import shutil

    other = shutil.copytree(reranked, tmp_path / "other")
    with pytest.raises(InputError, match="holds a 'reranked' artifact"):
        train(TrainConfig(data=str(reranked), out=str(other), model=str(tiny_t5), n_passages=2, max_steps=1,
                          batch_size=4, show_progress=False))


def test_a_finished_run_keeps_what_predicts_and_drops_its_resume_state(reranked, tmp_path, tiny_t5):
    """Once the final evaluation has written the manifest, ``checkpoints/`` (weights, AdamW's moments, scheduler, RNG)
    is deleted: ``best/``, the predictions, metrics and log stay and predict. A re-run trains again with the same
    settings and refuses other ones (as a checkpoint's resume key did); ``keep_resume_state`` keeps the checkpoints
    and enters no key."""
    from pgra.reader.predict import Reader
    from pgra.runtime.training import resume_settings

    base = dict(data=str(reranked), model=str(tiny_t5), n_passages=2, max_length=48, batch_size=4, max_steps=2,
                save_every=1, eval_every=1, learning_rate=1e-3, show_progress=False)
    out = tmp_path / "run"
    train(TrainConfig(out=str(out), **base))
    assert not (out / "checkpoints").exists() and not list(out.glob(".checkpoints.*"))
    for name in ("best/model.safetensors", "predictions_dev.jsonl", "predictions_test.jsonl", "metrics.json",
                 "train_log.jsonl", "manifest.json"):
        assert (out / name).is_file(), name
    reader = Reader.load(out)
    assert reader.task.name == "sky"
    weights = (out / "best" / "model.safetensors").read_bytes()
    train(TrainConfig(out=str(out), **base))  # finished, no checkpoint: trained again, to the same reader
    assert (out / "best" / "model.safetensors").read_bytes() == weights and not (out / "checkpoints").exists()
    with pytest.raises(InputError, match="finished run written with another config"):
        train(TrainConfig(out=str(out), **{**base, "learning_rate": 5e-4}))
    kept = tmp_path / "kept"
    train(TrainConfig(out=str(kept), keep_resume_state=True, **base))
    assert (kept / "checkpoints" / "step_2" / "trainer_state.json").is_file()
    assert (kept / "best" / "model.safetensors").read_bytes() == weights
    assert resume_settings(TrainConfig(keep_resume_state=True)) == resume_settings(TrainConfig())


def _losses(run: Path) -> list[float]:
    return [json.loads(x)["loss"] for x in (run / "train_log.jsonl").read_text().splitlines()]


def _with_dropout(model: Path, out: Path, rate: float = 0.1) -> Path:
    """A copy of a tiny reader whose dropout is on (the fixture's is off)."""
    import shutil

    shutil.copytree(model, out)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "dropout_rate": rate}))
    return out


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_adamw_kernels_train_like_the_default(reranked, tmp_path, tiny_t5, impl):
    """``adamw_impl`` foreach and fused: the same losses and weights as the default loop, within float rounding."""
    base = dict(data=str(reranked), model=str(tiny_t5), n_passages=2, max_length=48, batch_size=4, max_steps=4,
                eval_every=0, learning_rate=1e-3, show_progress=False, test_split="")
    train(TrainConfig(out=str(tmp_path / "auto"), **base))
    train(TrainConfig(out=str(tmp_path / impl), adamw_impl=impl, **base))
    assert _losses(tmp_path / impl) == close(_losses(tmp_path / "auto"), depth=numerics.trained(4, numerics.TINY_SEQ2SEQ))
    ref, got = (load_file(tmp_path / r / "best" / "model.safetensors") for r in ("auto", impl))
    # the same gradients, one update's arithmetic in another order
    assert_close(numerics.flat(got), numerics.flat(ref), depth=numerics.trained(4, numerics.TINY_SEQ2SEQ))
    assert json.loads((tmp_path / impl / "manifest.json").read_text())["config"]["adamw_impl"] == impl


def _train_compiled_apart(settings: dict, cache: Path) -> None:
    """``train(TrainConfig(**settings))`` in a process of its own with its own inductor cache: compiled kernels
    and dynamo's state then depend on nothing an earlier test left in this process or in the machine's shared
    cache (in the suite's process the compiled backward once failed with a kernel's "tuple args required" and once
    aborted, after hundreds of other tests; alone it passed)."""
    code = ("import json, sys; from pgra.reader.train import TrainConfig, train; "
            "train(TrainConfig(**json.loads(sys.argv[1])))")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "TORCHINDUCTOR_COMPILE_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(settings)], env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_compiled_reader_trains_like_eager_with_dropout(reranked, tmp_path, tiny_t5):
    """``compile=True``: the same losses (dropout on: each batch's masks come from its seed in both) and weights
    as eager mode within float rounding, under the same state-dict names."""
    model = _with_dropout(tiny_t5, tmp_path / "model")
    # every batch padded to max_length: one shape, so one graph compiled (batches of their own widths compile a
    # second, dynamic-shape graph: 1.7x the time)
    base = dict(data=str(reranked), model=str(model), n_passages=2, max_length=48, batch_size=4, max_steps=3,
                eval_every=0, learning_rate=1e-3, show_progress=False, test_split="", pad_to_multiple=48)
    train(TrainConfig(out=str(tmp_path / "eager"), **base))
    _train_compiled_apart({**base, "out": str(tmp_path / "compiled"), "compile": True}, tmp_path / "inductor")
    eager, compiled = _losses(tmp_path / "eager"), _losses(tmp_path / "compiled")
    assert compiled == close(eager, depth=numerics.trained(3, numerics.TINY_SEQ2SEQ))
    train(TrainConfig(out=str(tmp_path / "no-dropout"), **{**base, "model": str(tiny_t5)}))
    assert _losses(tmp_path / "no-dropout") != close(eager, depth=numerics.trained(3, numerics.TINY_SEQ2SEQ))  # masks
    # The weights, within what fp32 rounding allows. Inductor's vectorised kernels sum in another order than eager
    # (lanes of 8 floats with AVX2, 16 with AVX-512), so each gradient differs by a few ulps of the terms summed.
    # AdamW moves a weight by lr_t * m/(sqrt(v) + eps) (bias-corrected moments; plus the decay lr_t * wd * w, the
    # same in both runs): where |g| >> eps that ratio depends on the ratios of the steps' gradients, so a relative
    # change of 1e-6 in g moves the weight by ~1e-6 * lr_t; but where a gradient cancels to within rounding of 0,
    # lr_t * g/(|g| + eps) is anywhere in (-lr_t, lr_t) as the rounding goes. So no elementwise tolerance below
    # the optimizer's own bound holds on every CPU (the largest difference: 1.4e-6 with AVX-512, 2.55e-5 with AVX2,
    # on an EPYC and under ATEN_CPU_CAPABILITY=avx2 alike): by Cauchy-Schwarz |m|/sqrt(v) <= sqrt(sum_i a_i^2/b_i)
    # <= 1.004 for t <= 3 (a_i, b_i: the moments' weights), so two runs differ by at most 2 * 1.004 * sum_t lr_t
    # (the linear decay: lr * (1 + 2/3 + 1/3)). The bulk is checked on the updates w - w0 (|w_eager - w0| is about
    # 0.35 here): one weight flipping its whole step (4e-3) would make their relative L2 difference ~1e-2, and
    # rounding makes it 7e-6 (AVX-512) to 7e-5 (AVX2); a real divergence (other dropout masks, a skipped step,
    # another batch) makes it O(1): 0.78 for the run without dropout.
    init = load_file(model / "model.safetensors")
    ref, got, other = (load_file(tmp_path / r / "best" / "model.safetensors") for r in ("eager", "compiled",
                                                                                       "no-dropout"))
    assert set(ref) == set(got) == set(init)
    flat = lambda w: torch.cat([w[k].double().flatten() for k in sorted(init)])  # noqa: E731
    w0, w_eager, w_compiled = flat(init), flat(ref), flat(got)
    assert (w_compiled - w_eager).abs().max().item() <= 2 * 1.004 * 1e-3 * (1 + 2 / 3 + 1 / 3)
    relative = lambda w: ((w - w_eager).norm() / (w_eager - w0).norm()).item()  # noqa: E731
    assert relative(w_compiled) < 1e-2 < 0.1 < relative(flat(other))


def test_reader_predicts_in_bf16_when_asked(reranked, tmp_path, tiny_t5):
    """``eval_dtype=bf16``: the run's dev and test predictions come from a bf16 copy of best/, within 1e-2 of fp32's;
    ``Reader.load`` predicts in the run's recorded precision unless told another."""
    from pgra.reader.predict import Reader

    base = dict(data=str(reranked), model=str(tiny_t5), n_passages=2, max_length=48, batch_size=4, max_steps=3,
                eval_every=0, learning_rate=1e-3, show_progress=False)
    train(TrainConfig(out=str(tmp_path / "fp32"), **base))
    train(TrainConfig(out=str(tmp_path / "bf16"), eval_dtype="bf16", **base))
    lines = lambda run: [json.loads(x) for x in (tmp_path / run / "predictions_test.jsonl").read_text().splitlines()]  # noqa: E731
    for a, b in zip(lines("fp32"), lines("bf16"), strict=True):
        assert max(abs(a["scores"][k] - b["scores"][k]) for k in a["scores"]) < 1e-2
    assert lines("fp32") != lines("bf16")  # bf16 rounding shows in the probabilities
    records = [json.loads(x) for x in (reranked / "test.jsonl").read_text().splitlines()]
    recorded = Reader.load(tmp_path / "bf16")
    assert next(recorded.model.parameters()).dtype == torch.bfloat16
    assert [g["scores"] for g in recorded.predict(records)] == [s["scores"] for s in lines("bf16")]
    as_fp32 = Reader.load(tmp_path / "bf16", dtype="fp32")
    assert next(as_fp32.model.parameters()).dtype == torch.float32
    assert next(Reader.load(tmp_path / "fp32").model.parameters()).dtype == torch.float32


def test_reader_load_refuses_an_unknown_precision(reranked, tmp_path, tiny_t5):
    """A precision passed in, or edited into the run's manifest by hand, is refused naming where it came from."""
    from pgra.reader.predict import Reader

    out = tmp_path / "run"
    train(TrainConfig(data=str(reranked), out=str(out), model=str(tiny_t5), n_passages=2, max_length=48,
                      batch_size=4, max_steps=1, eval_every=0, show_progress=False, test_split=""))
    with pytest.raises(InputError, match=r"field 'dtype'.*unknown precision 'fp8'"):
        Reader.load(out, dtype="fp8")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["config"]["eval_dtype"] = "../half"
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"manifest.json \(field 'config.eval_dtype'\).*'\.\./half'"):
        Reader.load(out)
    assert next(Reader.load(out / "best").model.parameters()).dtype == torch.float32  # best/ alone: fp32


def test_the_host_reads_a_steps_loss_only_once_the_next_step_is_queued(reranked, tmp_path, tiny_t5, monkeypatch):
    """Reading a step's loss makes the host wait for that step: the loop reads it (and logs the step) after the next
    step's forward is queued (the device never idles while the host prepares a batch), and at once only at a checkpoint or an
    evaluation, which need the step's record. The log and the checkpoints hold every step, in order."""
    import pgra.reader.train as train_mod

    events: list[str] = []
    cfg = TrainConfig(data=str(reranked), out=str(tmp_path / "run"), model=str(tiny_t5), n_passages=2,
                      max_length=48, batch_size=4, max_steps=7, save_every=3, eval_every=5, learning_rate=1e-3,
                      test_split="", show_progress=False)
    s = train_mod.setup(cfg)
    s.reader.register_forward_pre_hook(lambda *_: events.append("forward"))
    # a step's record is written to the training log right after its loss is read
    monkeypatch.setattr(train_mod, "json", SimpleNamespace(
        dumps=lambda record: (events.append("read"), json.dumps(record))[1], loads=json.loads))
    evaluate = train_mod._evaluate_dev

    def evaluated(*a):  # what the evaluation itself runs and reads is not the loop's
        seen = len(events)
        result = evaluate(*a)
        del events[seen:]
        events.append("evaluate")
        return result

    monkeypatch.setattr(train_mod, "_evaluate_dev", evaluated)
    train_mod.train_loop(s)
    order = "".join({"forward": "F", "read": "R", "evaluate": "E"}[e] for e in events)
    # steps 1..7: step 2 logs step 1 after its own forward, and so on; 3 and 6 checkpoint and 7 is the last (each
    # logs itself at once), 5 evaluates and logs itself with its dev metric (the old loop: FRFRFR...)
    assert order == "F" "F" "R" "F" "R" "R" "F" "F" "R" "E" "R" "F" "R" "F" "R", order
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, 8)) and "dev_accuracy" in log[4]
    assert [r["step"] for r in s.state["history"]] == list(range(1, 8))


def test_batches_padded_to_a_multiple_train_like_unpadded_ones(reranked, tmp_path, tiny_t5):
    """``pad_to_multiple``: every batch's width is its longest input rounded up to the multiple, never past
    ``max_length`` (fewer shapes for compile and CUDA graphs); padding is masked, so a reader without dropout
    trains to the same losses."""
    from pgra.reader.fid import load_tokenizer
    from pgra.tasks import task_from_manifest

    tok = load_tokenizer(str(tiny_t5))
    task = task_from_manifest(json.loads((reranked / "manifest.json").read_text()), reranked / "manifest.json", "")
    records = [json.loads(x) for x in (reranked / "train.jsonl").read_text().splitlines()][:4]
    longest = ReaderFormatter(task, tok, 2, 48).collate(records)["input_ids"].shape[-1]
    assert longest == 32  # the fixture's inputs
    for multiple, max_length, width in ((24, 48, 48), (20, 45, 40), (64, 45, 45), (16, 48, 32), (1, 48, 32)):
        batch = ReaderFormatter(task, tok, 2, max_length).collate(records, multiple)
        assert batch["input_ids"].shape[-1] == width and batch["attention_mask"].sum() == \
            ReaderFormatter(task, tok, 2, 48).collate(records)["attention_mask"].sum()
    base = dict(data=str(reranked), model=str(tiny_t5), n_passages=2, max_length=48, batch_size=4, max_steps=3,
                eval_every=0, learning_rate=1e-3, show_progress=False, test_split="")
    train(TrainConfig(out=str(tmp_path / "plain"), **base))
    train(TrainConfig(out=str(tmp_path / "padded"), pad_to_multiple=24, **base))
    assert _losses(tmp_path / "padded") == close(_losses(tmp_path / "plain"), depth=numerics.trained(3, numerics.TINY_SEQ2SEQ))


def test_training_collation_tokenizes_each_pair_once(reranked, tiny_t5):
    """``cache_ids`` (what training uses): a batch collated again (the next epoch) is the same tensors and calls the
    tokenizer no more; without it, every collation tokenizes again."""
    from pgra.reader.fid import load_tokenizer
    from pgra.tasks import task_from_manifest

    task = task_from_manifest(json.loads((reranked / "manifest.json").read_text()), reranked / "manifest.json", "")
    records = [json.loads(x) for x in (reranked / "train.jsonl").read_text().splitlines()][:4]
    tok, calls = load_tokenizer(str(tiny_t5)), []
    plain = ReaderFormatter(task, tok, 2, 24).collate(records)  # 24 tokens: the evidence is cut (several calls)

    class Counting:
        def __getattr__(self, name):
            return getattr(tok, name)

        def __call__(self, *a, **k):
            calls.append(1)
            return tok(*a, **k)

    fmt = ReaderFormatter(task, Counting(), 2, 24, cache_ids=True)
    first = fmt.collate(records)
    built = len(calls)
    again = fmt.collate(records)
    assert len(calls) == built > 8  # 4 inputs x 2 passages, some cut: more than one call each the first time
    for batch in (first, again):
        assert all(torch.equal(batch[k], plain[k]) for k in plain)
    uncached = ReaderFormatter(task, Counting(), 2, 24)
    before = len(calls)
    uncached.collate(records), uncached.collate(records)
    assert len(calls) - before == 2 * (built - len(fmt.targets))  # each time again (less the label targets)


def test_a_compile_mode_without_compile_is_refused(reranked, tmp_path, tiny_t5):
    with pytest.raises(InputError, match="compile_mode=reduce-overhead is a mode of compile"):
        train(TrainConfig(data=str(reranked), out=str(tmp_path / "run"), model=str(tiny_t5), n_passages=2,
                          max_steps=1, compile_mode="reduce-overhead", show_progress=False))
    assert not (tmp_path / "run").exists()
