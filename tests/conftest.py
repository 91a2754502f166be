"""Shared fixtures: tiny random models built from configs (no downloads) and small corpora."""

from __future__ import annotations

import json
import os
import re
import string
from pathlib import Path

import pytest
import yaml

from pgra.core.config import to_dict
from pgra.storage.artifacts import write_manifest
from pgra.tasks import TaskSpec

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["the", "a", "of", "and", "to", "in", "is", "was", "it", "for", "on", "with", "as", "by", "at", "from",
         "his", "her", "that", "this", "be", "are", "an", "or", "which", "sun", "planet", "film", "music", "war",
         "city", "river", "game", "king", "queen", "moon", "star", "orbit", "light", "water", "town", "art", "song"]

SENTENCES = [
    "The sun is a star at the centre of the solar system.",
    "The moon orbits the planet once a month.",
    "A river runs through the old town.",
    "The king and the queen ruled the city for ten years.",
    "The film won a prize for its music.",
    "The war ended in 1918.",
    "Water boils at one hundred degrees.",
    "The game is played with a ball and two teams.",
    "Light from the star takes years to arrive.",
    "The song was written by a famous artist.",
    "The city is on the bank of a river.",
    "The planet has two moons and a ring.",
    "The town was founded by a king.",
    "Music and art were taught in the city.",
    "A star is a ball of hot gas.",
    "The queen wrote a song about the war.",
    "The river flows to the sea.",
    "Each orbit of the moon takes a month.",
    "The film was shot in the town.",
    "The game ended with a win for the city.",
    "It was the coldest year of the war.",
    "Light is faster than sound.",
    "The art of the king was famous.",
    "The sun rises in the east.",
]


def pytest_configure(config) -> None:
    """Under pytest-xdist (``make test`` runs ``-n``), each worker gets its share of the cores, as do the processes
    it starts: N workers each running torch with every core's thread would fight over the cores."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 1:
        import torch

        threads = max(1, (os.cpu_count() or 1) // workers)
        torch.set_num_threads(threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))


def pytest_terminal_summary(terminalreporter) -> None:
    """The SIMD level the suite ran at (torch's, and the variables that held it and the libraries under it)."""
    import torch

    from pgra.runtime.environment import SIMD_VARIABLES

    held = " ".join(f"{k}={os.environ[k]}" for k in SIMD_VARIABLES if k in os.environ) or "nothing held"
    terminalreporter.write_line(f"SIMD level: torch {torch.backends.cpu.get_cpu_capability()} ({held})")


# the suite's longest tests (tens of seconds to minutes each on 2 cores): under pytest-xdist they start first, so
# that the short ones fill the workers around them instead of one long test running alone at the end
RUN_FIRST = ("tests/test_tutorials.py::", "tests/test_gpu_accept.py::", "tests/test_reader.py::test_compiled",
             "tests/test_reader.py::test_deepspeed", "tests/test_plugins.py::test_plug_ins_reach",
             "tests/test_demo_integration.py::", "tests/test_fault_injection.py::",
             "tests/test_export_install.py::test_the_cards_install_lines",
             "tests/test_doc_figures.py::test_the_dry_runs_the_tutorial_quotes")


# files whose every test is numerically sensitive (byte-for-byte runs, faiss near ties, rounded golden contents)
NUMERICS_FILES = ("test_rank_determinism.py", "test_golden.py", "test_dense.py", "test_index.py",
                  "test_large_corpora.py", "test_bm25.py")
_USES_POLICY = re.compile(r"\bnumerics\.|(?<![.\w])(assert_close|close)\(")


def _mark_numerics(items) -> None:
    """``numerics``: the tests whose floats pass through batched or vectorised kernels (each compares by the policy
    of tests/numerics.py, found in its source) and :data:`NUMERICS_FILES`; ``make test-simd`` runs them under each
    instruction set."""
    import inspect

    seen: dict[object, bool] = {}
    for item in items:
        function = getattr(item, "function", None)
        if function not in seen:
            try:
                seen[function] = bool(_USES_POLICY.search(inspect.getsource(function)))
            except (OSError, TypeError):
                seen[function] = False
        if seen[function] or item.path.name in NUMERICS_FILES:
            item.add_marker(pytest.mark.numerics)


def pytest_collection_modifyitems(config, items) -> None:
    """Marks the numerically sensitive tests; under pytest-xdist: the longest tests (:data:`RUN_FIRST`, then every
    multi-process one) first, each group in its collected order (every worker collects the same order)."""
    _mark_numerics(items)
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0) < 2:
        return

    def rank(item) -> int:
        if item.nodeid.startswith(RUN_FIRST):
            return 0
        return 1 if item.get_closest_marker("distributed") else 2

    items.sort(key=rank)


def load_script(rel: str, name: str | None = None):
    """A script of the repository (``bench/x.py``, ``scripts/x.py``) loaded as a module, as its tests call it."""
    import importlib.util

    path = ROOT / rel
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launch_failure(proc) -> str:
    """Why a torchrun launch failed: every rank's own ``error:`` line and traceback tail first (the last lines of
    stderr are usually the launcher's report about the rank that died, not the rank's reason), then the tail."""
    lines = proc.stderr.splitlines()
    reasons = [x for x in lines if re.sub(r"^\[rank\d+\]:\s*", "", x).startswith("error:") or "Error: " in x]
    return "\n".join(["rank errors:", *reasons[:20], "stderr tail:", proc.stderr[-3000:]])


def _write_tiny_bert(path: Path, with_pooler: bool = True, seed: int = 0) -> Path:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    path.mkdir(parents=True, exist_ok=True)
    vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(string.ascii_lowercase) + list(string.digits)
             + ["##" + c for c in string.ascii_lowercase + string.digits] + list(".,!?;:'\"()-") + WORDS)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (path / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": 128}))
    tok = AutoTokenizer.from_pretrained(str(path))
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128)
    model = BertModel(cfg, add_pooling_layer=with_pooler)
    model.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    """A 2-layer, 32-dim random BERT with a pooler and a small WordPiece vocabulary."""
    return _write_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_bert_other(tmp_path_factory) -> Path:
    """Same architecture as tiny_bert, other random weights (a 'different encoder')."""
    return _write_tiny_bert(tmp_path_factory.mktemp("tiny-bert-other"), seed=1)


@pytest.fixture(scope="session")
def tiny_bert_no_pooler(tmp_path_factory) -> Path:
    return _write_tiny_bert(tmp_path_factory.mktemp("tiny-bert-nopool"), with_pooler=False)


def write_corpus(directory: Path) -> Path:
    path = directory / "corpus.txt"
    path.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    return path


@pytest.fixture()
def corpus_txt(tmp_path) -> Path:
    return write_corpus(tmp_path)


def demo_asset(rel: str) -> Path:
    """A prepared offline demo asset; missing ones fail in CI and skip elsewhere (run `make prepare`)."""
    path = ROOT / rel
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{path} is missing: `make prepare` should have built it")
        pytest.skip(f"{path} not prepared; run `make prepare`")
    return path


def _write_tiny_causal_lm(path: Path, arch: str, seed: int = 0) -> Path:
    """A 2-layer random causal LM (OPT, GPT-2 or Llama) with a small byte-level BPE trained on the fixtures;
    ``opt-proj`` is OPT-350m's shape, whose decoder projects its output (32 -> 16) below the hidden size."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        OPTConfig,
        OPTForCausalLM,
        PreTrainedTokenizerFast,
    )

    path.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<pad>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = SENTENCES + ["Follow the demonstrations:\n", "The answer is positive\n\n", "The answer is negative",
                          "Does the following sentence have a positive or negative sentiment?\n"] * 3
    tok.train_from_iterator(corpus, trainer)
    if arch.startswith("opt"):  # OPT's tokenizer puts </s> in front of every text
        tok.post_processor = processors.TemplateProcessing(single="</s> $A", special_tokens=[("</s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="</s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")
    fast.save_pretrained(str(path))
    torch.manual_seed(seed)
    vocab = tok.get_vocab_size()
    if arch.startswith("opt"):
        model = OPTForCausalLM(OPTConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, ffn_dim=64,
                                         num_attention_heads=2, max_position_embeddings=512,
                                         word_embed_proj_dim=16 if arch == "opt-proj" else 32, pad_token_id=0, bos_token_id=1,
                                         eos_token_id=1))
    elif arch == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=2, n_positions=512,
                                           bos_token_id=1, eos_token_id=1, pad_token_id=0))
    else:
        model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                             max_position_embeddings=512, pad_token_id=0, bos_token_id=1,
                                             eos_token_id=1))
    model.save_pretrained(str(path))
    return path


@pytest.fixture(scope="session", params=["opt", "opt-proj", "gpt2", "llama"])
def tiny_lm(request, tmp_path_factory) -> Path:
    return _write_tiny_causal_lm(tmp_path_factory.mktemp(f"tiny-{request.param}"), request.param)


@pytest.fixture(scope="session")
def tiny_opt(tmp_path_factory) -> Path:
    return _write_tiny_causal_lm(tmp_path_factory.mktemp("tiny-opt-single"), "opt")


def write_tiny_t5(path: Path, seed: int = 0) -> Path:
    """A 2-layer random T5 (dropout 0) with a word-level tokenizer that has T5's sentinels and </s> suffix."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    path.mkdir(parents=True, exist_ok=True)
    specials = ["<pad>", "</s>", "<unk>", "<extra_id_0>", "<extra_id_1>"]
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    words = SENTENCES + ["This is about sky town great terrible correct incorrect question context ? : ,"]
    tok.train_from_iterator(words, trainers.WordLevelTrainer(special_tokens=specials))
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
                                   additional_special_tokens=["<extra_id_0>", "<extra_id_1>"])
    fast.save_pretrained(str(path))
    torch.manual_seed(seed)
    cfg = T5Config(vocab_size=tok.get_vocab_size(), d_model=32, d_ff=64, d_kv=16, num_layers=2, num_heads=2,
                   dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    T5ForConditionalGeneration(cfg).save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def tiny_t5(tmp_path_factory) -> Path:
    return write_tiny_t5(tmp_path_factory.mktemp("tiny-t5"))


def _write_tiny_bert2bert(tiny_bert: Path, path: Path, dropout: bool) -> Path:
    """An EncoderDecoderModel warm-started from the tiny BERT on both sides, with BERT's dropout (0.1) kept as
    ``pgra prepare-demo`` builds the demo's bert2bert-minilm, or with every dropout 0."""
    from transformers import EncoderDecoderModel

    from pgra.reader.fid import load_tokenizer

    zero = {} if dropout else {f"{side}_{kind}_dropout_prob": 0.0 for side in ("encoder", "decoder")
                                for kind in ("hidden", "attention_probs")}
    model = EncoderDecoderModel.from_encoder_decoder_pretrained(str(tiny_bert), str(tiny_bert), **zero)
    assert (model.config.decoder.hidden_dropout_prob > 0) == dropout
    tok = load_tokenizer(str(tiny_bert))
    model.config.decoder_start_token_id, model.config.pad_token_id = tok.cls_token_id, tok.pad_token_id
    model.config.eos_token_id = tok.sep_token_id
    model.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def tiny_bert2bert(tiny_bert, tmp_path_factory) -> Path:
    """The tiny bert2bert reader with dropout 0."""
    return _write_tiny_bert2bert(tiny_bert, tmp_path_factory.mktemp("tiny-b2b"), dropout=False)


@pytest.fixture(scope="session")
def tiny_bert2bert_dropout(tiny_bert, tmp_path_factory) -> Path:
    """The tiny bert2bert reader with BERT's dropout, like the demo's."""
    return _write_tiny_bert2bert(tiny_bert, tmp_path_factory.mktemp("tiny-b2b-dropout"), dropout=True)


# the reader tests' task and a small reranked folder (also used by test_tracking.py)
TASK = TaskSpec(name="sky", labels=["sky", "town"], rerank_template="Sky or town?\n{text}",
                demo_words={"sky": "sky", "town": "town"}, reader_words={"sky": "sun", "town": "city"},
                reader_template="{evidence} {text} This is about {mask} .")


def _records(n=16):
    recs = []
    for i in range(n):
        label = "sky" if i % 2 == 0 else "town"
        text = SENTENCES[i % len(SENTENCES)]
        ctxs = [{"id": j, "text": SENTENCES[(i + j) % len(SENTENCES)], "score": 0.1} for j in range(3)]
        recs.append({"id": f"q{i}", "text": text, "label": label, "ctxs": ctxs})
    return recs


@pytest.fixture()
def reranked(tmp_path) -> Path:
    d = tmp_path / "reranked"
    d.mkdir()
    for split, recs in (("train", _records(16)), ("dev", _records(6)), ("test", _records(6))):
        (d / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    write_manifest(d, {"kind": "reranked", "task": to_dict(TASK)})
    return d


# a two-label task (sky / town) given as a task YAML file with its own data (retrieval and experiment tests)
SKY = ["The star shines at night.", "The moon is bright tonight.", "The sun sets in the west.",
       "A planet moves around the sun.", "Light from the moon is soft.", "The star is far away.",
       "The orbit of the planet is long.", "The sun is hot.", "The moon has no light of its own.",
       "Stars and planets fill the sky."]
TOWN = ["The king lived in the city.", "The river runs by the town.", "The queen sang a song.",
        "The film was made in the city.", "The game was played in town.", "The war hurt the town.",
        "Art and music fill the city.", "The town has a river.", "The king wrote a song.",
        "The city has a famous film festival."]


def write_sky_task(tmp_path: Path) -> Path:
    """The sky / town task: its data under ``tmp_path/skydata`` and its YAML spec."""
    rows = [(f"s{i}", t, "sky") for i, t in enumerate(SKY)] + [(f"t{i}", t, "town") for i, t in enumerate(TOWN)]
    train, test = rows[:7] + rows[10:17], rows[7:10] + rows[17:]
    (tmp_path / "skydata").mkdir()
    for name, rs in (("train", train), ("test", test)):
        with open(tmp_path / "skydata" / f"{name}.jsonl", "w") as f:
            for i, t, y in rs:
                f.write(json.dumps({"id": i, "text": t, "label": y}) + "\n")
    spec = {"name": "sky", "labels": ["sky", "town"], "rerank_template": "Is this about the sky or a town?\n{text}",
            "demo_words": {"sky": "sky", "town": "town"}, "reader_words": {"sky": "sky", "town": "town"},
            "data": {"format": "jsonl", "path": "skydata", "id_column": "id",
                     "files": {"train": "train.jsonl", "test": "test.jsonl"}, "dev_fraction": 0.15}}
    path = tmp_path / "sky.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture()
def sky_task(tmp_path) -> Path:
    return write_sky_task(tmp_path)


@pytest.fixture()
def candidates(tmp_path, corpus_txt, sky_task) -> Path:
    """First-stage candidates (BM25, k=10) of the sky task over the fixture corpus."""
    from pgra.retrieval.candidates_stage import retrieve
    from pgra.retrieval.index import IndexConfig, build_index
    from pgra.retrieval.retrieve import RetrieveConfig

    index = build_index(IndexConfig(corpus=str(corpus_txt), out=str(tmp_path / "bm25"), retriever="bm25",
                                    show_progress=False))
    return retrieve(RetrieveConfig(task=str(sky_task), index=str(index), out=str(tmp_path / "cands"), k=10,
                                   show_progress=False))


def copy_in_dtype(src: Path, dst: Path, dtype: str) -> Path:
    """A copy of the model folder ``src`` whose safetensors weights are stored in ``dtype`` (as many hub
    checkpoints are: fp16 or bf16)."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config.update({k: dtype for k in ("dtype", "torch_dtype") if k in config} or {"dtype": dtype})
    (dst / "config.json").write_text(json.dumps(config))
    for f in dst.glob("*.safetensors"):
        save_file({k: v.to(getattr(torch, dtype)).contiguous() for k, v in load_file(f).items()}, f,
                  metadata={"format": "pt"})
    return dst


def one_error_line(argv: list[str], capsys) -> str:
    """Run the CLI on ``argv``: exit 2 with exactly one `error:` line and no traceback; returns that line."""
    from pgra.cli import main

    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


STALE_EXTENSION_LOCK_S = 600  # DeepSpeed's CPU op compiles in under 2 minutes on 2 cores


@pytest.fixture(scope="session")
def torch_extensions_unlocked() -> Path:
    """torch's JIT extension folder (DeepSpeed compiles its CPU shared-memory op there when a CPU process group
    starts) without a stale build lock: a run killed mid-compile leaves ``<name>/lock``, and torch's FileBaton
    then waits on it forever (every later DeepSpeed launch on the machine hung). A lock older than
    ``STALE_EXTENSION_LOCK_S`` is removed; returns the folder."""
    import time

    from torch.utils.cpp_extension import get_default_build_root

    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())
    for lock in list(root.glob("*/lock")) + list(root.glob("*/*/lock")):
        if time.time() - lock.stat().st_mtime > STALE_EXTENSION_LOCK_S:
            lock.unlink(missing_ok=True)
    return root
