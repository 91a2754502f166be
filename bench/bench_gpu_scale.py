"""The paper's scale on one GPU, without the hub: its architectures built from configs with random weights.

Measures, on the device it runs on:
1. the first stage: BERT-base encoding sentences of Wiki1M's length distribution (CLS pooler, length-sorted
   batches) and a flat faiss index over 1M vectors (built and searched);
2. the reranker: OPT-350m / 1.3b / 6.7b / 13b through pgra's own ``LMEmbedder`` path (the shared prompt head's KV
   cache once, each text's tokens batched by a token budget), in texts/s and tokens/s;
3. the reader: one Fusion-in-Decoder training step (T5-base, T5-large) at the paper's batch size with d=16
   passages of 128 tokens (AdamW, bf16 autocast on GPU);
and prints what the paper's Table 2 grid (8 tasks x {no retrieval, FiD, PGRA} x 3 seeds) costs in GPU hours on
that device, and the fraction of the device's bf16 peak each stage reaches (FLOPs estimated as 2 x parameters x
tokens for inference, 6 x for training; attention not counted, so the fractions are lower bounds).

    python bench/bench_gpu_scale.py                         # a GPU: the paper's sizes
    python bench/bench_gpu_scale.py --tiny --device cpu     # tiny configs on CPU (the test suite runs this)
    python bench/bench_gpu_scale.py --rerankers= --readers=t5-base --profile 5   # where a reader step's time goes
    python bench/bench_gpu_scale.py --rerankers= --readers=t5-base --reader-variants eager,fused,compile,fused+compile
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

# the paper's architectures (bert-base-uncased, facebook/opt-*, t5-base / t5-large), from their published configs
ARCHS = {
    "bert-base": ("bert", {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                           "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512}),
    "opt-350m": ("opt", {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "ffn_dim": 4096,
                         "word_embed_proj_dim": 512}),
    "opt-1.3b": ("opt", {"hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 32, "ffn_dim": 8192}),
    "opt-6.7b": ("opt", {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "ffn_dim": 16384}),
    "opt-13b": ("opt", {"hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 40, "ffn_dim": 20480}),
    "t5-base": ("t5", {"d_model": 768, "d_ff": 3072, "num_layers": 12, "num_decoder_layers": 12, "num_heads": 12,
                       "d_kv": 64}),
    "t5-large": ("t5", {"d_model": 1024, "d_ff": 4096, "num_layers": 24, "num_decoder_layers": 24, "num_heads": 16,
                        "d_kv": 64}),
}
TINY = {"bert": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64},
        "opt": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "ffn_dim": 64},
        "t5": {"d_model": 32, "d_ff": 64, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 2, "d_kv": 16}}
# dense bf16 tensor-core peaks (FLOP/s) by device name
PEAKS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12, "A10": 125e12,
         "V100": 125e12}
# LM-BFF splits of the paper's eight tasks: (train, test); the paper's reader batch size per task (Table 7)
TASKS = {"sst2": (6920, 872, 8), "sst5": (8544, 2210, 8), "cola": (8551, 1042, 8), "trec": (5452, 500, 4),
         "cr": (1775, 2000, 8), "mr": (8662, 2000, 8), "mpqa": (8606, 2000, 4), "subj": (8000, 2000, 8)}
STEPS, SEEDS, K, D, CORPUS = 5000, 3, 150, 16, 1_000_000


def build(name: str, tiny: bool, device: torch.device, dtype: torch.dtype, head: bool = False):
    """A randomly initialised model of architecture ``name`` on ``device`` (sdpa attention)."""
    from transformers import BertConfig, BertModel, OPTConfig, OPTModel, T5Config, T5ForConditionalGeneration

    family, cfg = ARCHS[name]
    cfg = {**cfg, **(TINY[family] if tiny else {})}
    if tiny and "word_embed_proj_dim" in cfg:  # keep OPT-350m's output projection (1024 -> 512) at tiny size
        cfg["word_embed_proj_dim"] = cfg["hidden_size"] // 2
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in its dtype: OPT-13b in fp32 first would not fit next to its copy
    try:
        with torch.device(device):
            if family == "bert":
                return BertModel(BertConfig(**cfg, attn_implementation="sdpa")).eval()
            if family == "opt":
                return OPTModel(OPTConfig(**cfg, vocab_size=50272, max_position_embeddings=2048,
                                          attn_implementation="sdpa")).eval()
            return T5ForConditionalGeneration(T5Config(**cfg, vocab_size=32128, decoder_start_token_id=0))
    finally:
        torch.set_default_dtype(default)


def sentence_lengths(n: int, rng: np.random.Generator) -> np.ndarray:
    """Token lengths like Wiki1M's sentences under BERT's tokenizer (log-normal, median ~26, clipped 4..128)."""
    return np.clip(np.round(rng.lognormal(np.log(26), 0.55, size=n)), 4, 128).astype(int)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def params(model) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.inference_mode()
def bench_encoding(args, device, dtype, rng) -> dict:
    """BERT-base encoding through pgra's own ``DenseEncoder.encode_ids`` (length-sorted batches, CLS pooler)."""
    from pgra.retrieval.encoder import DenseEncoder

    model = build("bert-base", args.tiny, device, dtype)
    encoder = DenseEncoder.from_model(model, pooler="cls", batch_size=args.encode_batch, name="bert-base")
    vocab = model.config.vocab_size
    ids = [rng.integers(1000, vocab, size=n).tolist() for n in sentence_lengths(args.encode_sentences, rng)]
    tokens = sum(map(len, ids))
    passes = []  # the first pass meets every batch shape for the first time (cuDNN plans one attention per shape)
    for _ in range(2):
        sync(device)
        start = time.perf_counter()
        encoder.encode_ids(ids)
        sync(device)
        passes.append(time.perf_counter() - start)
    seconds = passes[1]
    per_s = len(ids) / seconds
    n_index = args.index_vectors
    dim = model.config.hidden_size
    index_s, search_s = _flat_index(n_index, dim, rng)
    flops = 2 * params(model) * tokens
    return {"model": "bert-base", "params": params(model), "sentences": len(ids), "seconds": seconds,
            "first_pass_seconds": passes[0],
            "sentences_per_s": per_s, "tokens_per_s": tokens / seconds, "flops_per_s": flops / seconds,
            "corpus_encode_hours": CORPUS / per_s / 3600, "index_vectors": n_index, "index_build_s": index_s,
            "search_1000_queries_top150_s": search_s,
            "profile": profile_steps(lambda: encoder.encode_ids(ids[: args.encode_batch]), device, args.profile)
            if args.profile else None}


def _flat_index(n: int, dim: int, rng) -> tuple[float, float]:
    """Build a flat inner-product faiss index of ``n`` unit vectors and search 1,000 queries top-150."""
    import faiss

    vectors = rng.standard_normal((n, dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    start = time.perf_counter()
    index = faiss.IndexFlatIP(dim)
    index.add(vectors)
    built = time.perf_counter() - start
    queries = vectors[rng.choice(n, size=min(1000, n), replace=False)]
    start = time.perf_counter()
    index.search(queries, min(K, n))
    return built, time.perf_counter() - start


def bench_reranker(name: str, args, device, dtype, rng) -> dict:
    from pgra.rerank.prompt_guided.embedder import LMEmbedder

    model = build(name, args.tiny, device, dtype)
    cfg = model.config
    # batch rows x (prefix + own tokens) of keys and values under --rerank-kv-gib: what the cache path copies per
    # row (a model the shared-prefix attention does not fit), and a bound on the shared path's attention scores
    kv_per_token = 2 * cfg.num_hidden_layers * cfg.hidden_size * torch.finfo(dtype).bits // 8
    budget = min(args.rerank_token_budget, int(args.rerank_kv_gib * 2**30 / kv_per_token))
    emb = LMEmbedder.from_model(model, tokenizer=None, max_tokens_per_batch=budget,
                                max_batch_size=args.rerank_batch)
    vocab = model.config.vocab_size
    shared = rng.integers(1000, vocab, size=args.prefix_tokens).tolist()
    # each text: its own tokens (OPT's BPE gives about as many as BERT's WordPiece) + template tail and cue
    suffixes = [rng.integers(1000, vocab, size=int(n) + 6).tolist()
                for n in sentence_lengths(args.rerank_texts, rng)]
    emb.embed_suffix_ids(shared, suffixes[:8])  # warm-up
    emb.cost.tokens = 0
    sync(device)
    start = time.perf_counter()
    emb.embed_suffix_ids(shared, suffixes)
    sync(device)
    seconds = time.perf_counter() - start
    tokens = emb.cost.tokens
    out = {"model": name, "params": params(model), "texts": len(suffixes), "seconds": seconds,
           "texts_per_s": len(suffixes) / seconds, "tokens_per_s": tokens / seconds,
           "flops_per_s": 2 * params(model) * tokens / seconds, "prefix_tokens": len(shared),
           "token_budget": budget}
    return out


READER_VARIANTS = ("eager", "fused", "compile", "fused+compile", "compile+cudagraphs", "fused+compile+cudagraphs")
VARIANT_PARTS = ("eager", "fused", "compile", "cudagraphs")  # a variant: parts joined by "+"


def variant_parts(variant: str) -> set[str]:
    """The parts of a reader variant (``fused+compile`` -> {fused, compile}); ``cudagraphs`` is a compile mode
    (``compile_mode: reduce-overhead``), so it implies ``compile``."""
    parts = set(variant.split("+"))
    unknown = parts - set(VARIANT_PARTS)
    if unknown or not variant or ("eager" in parts and len(parts) > 1):
        raise ValueError(f"reader variant '{variant}': parts are {', '.join(VARIANT_PARTS)} joined by '+' "
                         "(eager alone)")
    return parts | ({"compile"} if "cudagraphs" in parts else set())


def bench_reader(name: str, args, device, variant: str = "eager") -> dict:
    """One FiD training step of reader ``name`` through pgra's own optimizer and compile paths (``variant``: eager
    = today's default; fused = ``adamw_impl: fused``; compile = ``compile: true``; cudagraphs = ``compile_mode:
    reduce-overhead``); the same random batches for every variant (seeded), so their losses compare."""
    from types import SimpleNamespace

    from pgra.reader.fid import FiDReader
    from pgra.reader.train import compile_for_training
    from pgra.runtime.training import adamw_with_schedule

    parts = variant_parts(variant)
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    model = build(name, args.tiny, device, torch.float32)
    model.train()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    fid = FiDReader(model)
    impl = "fused" if "fused" in parts else "auto"
    opt, _ = adamw_with_schedule(fid, SimpleNamespace(learning_rate=1e-4, weight_decay=0.01, warmup_steps=0,
                                                      max_steps=10**6, adamw_impl=impl))
    if "compile" in parts:
        compile_for_training(fid, "reduce-overhead" if "cudagraphs" in parts else "default")
    b, p, length = args.reader_batch, D, args.passage_tokens
    vocab = model.config.vocab_size
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    losses: list[torch.Tensor] = []

    def step() -> None:
        ids = torch.as_tensor(rng.integers(100, vocab, size=(b, p, length)), device=device)
        labels = torch.as_tensor(rng.integers(100, vocab, size=(b, 5)), device=device)
        if "cudagraphs" in parts:
            torch.compiler.cudagraph_mark_step_begin()
        with autocast:
            loss = fid(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(fid.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach().clone())  # a CUDA graph's output is overwritten by its next replay

    start = time.perf_counter()
    for _ in range(args.warmup_steps):
        step()
    sync(device)
    warmup_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync(device)
    per_step = (time.perf_counter() - start) / args.steps
    profile = profile_steps(step, device, args.profile) if args.profile else None
    enc_params = params(model.get_encoder())
    flops = 6 * enc_params * b * p * length + 6 * (params(model) - enc_params) * b * 5
    out = {"model": name, "variant": variant, "params": params(model), "batch": b, "passages": p,
           "passage_tokens": length, "s_per_step": per_step, "warmup_s": warmup_s, "flops_per_s": flops / per_step,
           "losses": [float(x) for x in losses[: args.warmup_steps + args.steps]],
           "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None,
           "profile": profile}
    return out  # the model and optimizer go with this frame; main empties the CUDA cache


def _loop_data(folder: Path, vocab: list[str], args, rng) -> Path:
    """A reranked data folder of random words: every (input, evidence) pair longer than ``--passage-tokens`` (the
    evidence is cut, so every batch is ``(batch, 16, passage_tokens)`` like the step benchmark's)."""
    from pgra.core.config import to_dict
    from pgra.storage.artifacts import write_manifest
    from pgra.tasks import TaskSpec

    task = TaskSpec(name="random", labels=["a", "b"], rerank_template="{text}", demo_words={"a": "w1", "b": "w2"},
                    reader_words={"a": "w1", "b": "w2"}, reader_template="{evidence} {text} This is {mask} .")
    words = lambda n: " ".join(vocab[i] for i in rng.integers(10, len(vocab), size=n))  # noqa: E731
    folder.mkdir(parents=True)
    for split, n in (("train", 64 * args.reader_batch), ("dev", 8), ("test", 8)):
        lines = [json.dumps({"id": f"{split}{i}", "text": words(24), "label": "ab"[i % 2],
                             "ctxs": [{"id": j, "text": words(args.passage_tokens), "score": 0.0} for j in range(D)]})
                 for i in range(n)]
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    write_manifest(folder, {"kind": "reranked", "task": to_dict(task)})
    return folder


def word_tokenizer(folder: Path, vocab_size: int) -> Path:
    """A word-level tokenizer of ``vocab_size`` words (``w0``, ``w1``, ...; T5's sentinels and ``</s>``) saved in
    ``folder``: the device has no hub to fetch T5's own."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "</s>", "<unk>", "<extra_id_0>", "<extra_id_1>"]
    words = specials + [f"w{i}" for i in range(vocab_size - len(specials))]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
                                   additional_special_tokens=["<extra_id_0>", "<extra_id_1>"])
    fast.save_pretrained(folder)
    return folder


def _loop_reader(name: str, folder: Path, args, device) -> Path:
    """Reader ``name`` (random weights) saved with a word-level tokenizer of its vocabulary's size."""
    model = build(name, args.tiny, torch.device("cpu"), torch.float32)
    model.config.pad_token_id, model.config.eos_token_id = 0, 1
    model.save_pretrained(folder)
    return word_tokenizer(folder, model.config.vocab_size)


def bench_train_loop(name: str, args, device, variant: str = "eager") -> dict:
    """pgra's own training loop (``pgra.reader.train.setup`` and ``train_loop``: collation and tokenization of each
    batch, the per-step loss read back, the scheduler, accelerate's bf16 autocast) on random words, timed over
    ``--steps`` steps after ``--warmup-steps``; checkpoints are not written (their cost is not a step's). Its
    difference from :func:`bench_reader`'s same variant is what the loop adds to a model step."""
    import tempfile

    import pgra.reader.train as train_mod
    from pgra.reader.config import TrainConfig

    parts = variant_parts(variant)
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        reader_dir = _loop_reader(name, root / "reader", args, device)
        vocab = list(json.loads((reader_dir / "tokenizer.json").read_text())["model"]["vocab"])
        data = _loop_data(root / "data", vocab, args, rng)
        total = args.warmup_steps + args.steps
        cfg = TrainConfig(data=str(data), out=str(root / "run"), model=str(reader_dir), n_passages=D,
                          max_length=args.passage_tokens, batch_size=args.reader_batch, max_steps=total,
                          eval_every=0, test_split="", show_progress=False, seed=args.seed,
                          mixed_precision="bf16" if device.type == "cuda" else "no",
                          adamw_impl="fused" if "fused" in parts else "auto", compile="compile" in parts,
                          compile_mode="reduce-overhead" if "cudagraphs" in parts else "default")
        saved = train_mod.save_checkpoint, train_mod._save_model
        train_mod.save_checkpoint = train_mod._save_model = lambda *a, **k: None
        try:
            s = train_mod.setup(cfg)
            s.cfg.max_steps = args.warmup_steps
            start = time.perf_counter()
            train_mod.train_loop(s)
            sync(device)
            warmup_s = time.perf_counter() - start
            s.cfg.max_steps = total
            start = time.perf_counter()
            train_mod.train_loop(s)
            sync(device)
            per_step = (time.perf_counter() - start) / args.steps
        finally:
            train_mod.save_checkpoint, train_mod._save_model = saved
        losses = [r["loss"] for r in s.state["history"]]
    return {"model": name, "variant": variant, "batch": args.reader_batch, "passages": D,
            "passage_tokens": args.passage_tokens, "s_per_step": per_step, "warmup_s": warmup_s, "losses": losses}


def profile_steps(step, device: torch.device, steps: int, top: int = 15) -> dict:
    """Where a step's time goes: ``steps`` more steps under torch.profiler; ``ops``: the ``top`` operators by their
    own (self) time on the device that runs them (CUDA kernels on a GPU, CPU otherwise), each with its share of the
    profiled total and its call count; ``device_ms_per_step``: that total per step (on a GPU the time its kernels
    ran), ``wall_ms_per_step``: the profiled steps' wall-clock per step (their ratio is how busy the device was)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        sync(device)
    wall = time.perf_counter() - start
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    averages = prof.key_averages()
    if device.type == "cuda":  # the kernels' time is listed twice: under each kernel and under the op that ran it
        from torch.autograd import DeviceType

        # the device's events less the annotations laid over kernels (an optimizer step, a compiled graph's call)
        total = sum(e.self_device_time_total for e in averages
                    if e.device_type == DeviceType.CUDA and not e.is_user_annotation) or 1.0
        events = [e for e in averages if e.device_type != DeviceType.CUDA and e.self_device_time_total > 0]
    else:
        events = [e for e in averages if e.self_cpu_time_total > 0]
        total = sum(e.self_cpu_time_total for e in events) or 1.0
    events.sort(key=lambda e: getattr(e, attr), reverse=True)
    ops = [{"op": e.key, "self_ms_per_step": getattr(e, attr) / 1e3 / steps, "share": getattr(e, attr) / total,
            "calls_per_step": e.count / steps} for e in events[:top]]
    return {"ops": ops, "device_ms_per_step": total / 1e3 / steps, "wall_ms_per_step": 1e3 * wall / steps,
            "calls_per_step": sum(e.count for e in events) / steps}


def _print_profile(profile: dict | None) -> None:
    if not profile:
        return
    print(f"  profiled: {profile['wall_ms_per_step']:.1f} ms/step wall, device busy {profile['device_ms_per_step']:.1f} "
          f"ms/step ({profile['calls_per_step']:.0f} device ops/step)", flush=True)
    for op in profile["ops"]:
        print(f"  {op['share']:6.1%} {op['self_ms_per_step']:9.2f} ms/step {op['calls_per_step']:7.0f} "
              f"calls  {op['op']}", flush=True)


def _measured(what: str, fn, *a, **k) -> dict | None:
    """``fn(*a, **k)``, or None with the error printed: one stage that fails (out of memory, a compile error) does
    not cost the run's other numbers."""
    try:
        return fn(*a, **k)
    except Exception as e:  # noqa: BLE001 - a benchmark run reports every stage it can
        print(f"{what}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}", flush=True)
        return {"error": f"{type(e).__name__}: {e}"[:2000]}


def _free(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def grid_cost(encoding: dict, rerank: dict, reader: dict) -> dict:
    """GPU hours of Table 2's grid: the index once, reranking every input's 150 candidates with the largest LM
    measured (no de-duplication: an upper bound), and 8 tasks x 3 seeds x {FiD, PGRA} readers of 5,000 steps
    (the no-retrieval reader's step counted as 1/16 of a d=16 step)."""
    index_h = encoding["corpus_encode_hours"]
    texts = sum((train + test) * (K + 1) for train, test, _ in TASKS.values())
    rerank_h = texts / rerank["texts_per_s"] / 3600
    batch_scale = {t: bs / reader["batch"] for t, (_, _, bs) in TASKS.items()}
    reader_h = sum(STEPS * reader["s_per_step"] * s * SEEDS * (2 + 1 / D) for s in batch_scale.values()) / 3600
    return {"index_hours": index_h, "rerank_hours": rerank_h, "rerank_texts": texts, "reader_hours": reader_h,
            "total_hours": index_h + rerank_h + reader_h, "reranker": rerank["model"], "reader": reader["model"],
            "reader_variant": reader.get("variant", "eager")}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny configs and sizes (CPU smoke run)")
    ap.add_argument("--rerankers", default="opt-350m,opt-1.3b,opt-6.7b,opt-13b")
    ap.add_argument("--readers", default="t5-base,t5-large")
    ap.add_argument("--encode-sentences", type=int, default=100_000)
    ap.add_argument("--encode-batch", type=int, default=512)
    ap.add_argument("--index-vectors", type=int, default=CORPUS)
    ap.add_argument("--rerank-texts", type=int, default=8192)
    ap.add_argument("--rerank-token-budget", type=int, default=65536)
    ap.add_argument("--rerank-batch", type=int, default=512)
    ap.add_argument("--rerank-kv-gib", type=float, default=16.0, help="GiB of keys and values a batch may hold")
    ap.add_argument("--prefix-tokens", type=int, default=320, help="demonstrations + template head (SST-2, m=8)")
    ap.add_argument("--reader-batch", type=int, default=8)
    ap.add_argument("--passage-tokens", type=int, default=128)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--reader-variants", default="eager",
                    help=f"comma-separated, each measured against the first: {', '.join(READER_VARIANTS)} (parts "
                         f"{', '.join(VARIANT_PARTS)} joined by '+')")
    ap.add_argument("--loop-variants", default="",
                    help="also time pgra's own training loop (collation, loss read-back, scheduler) per variant")
    ap.add_argument("--profile", type=int, default=0, metavar="STEPS",
                    help="also profile this many reader steps and print the operators taking the most time")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bench/out/gpu_scale.json")
    args = ap.parse_args(argv)
    if args.tiny:
        args.encode_sentences, args.index_vectors, args.rerank_texts = 256, 5000, 64
        args.encode_batch, args.rerank_token_budget, args.steps, args.warmup_steps = 64, 4096, 2, 1
        args.reader_batch, args.passage_tokens, args.prefix_tokens = 2, 32, 64
    variants = [v for v in args.reader_variants.split(",") if v]
    loop_variants = [v for v in args.loop_variants.split(",") if v]
    for v in variants + loop_variants:
        try:
            variant_parts(v)
        except ValueError as e:
            ap.error(str(e))
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    rng = np.random.default_rng(args.seed)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = next((v for k, v in PEAKS.items() if k in name), None)
    result = {"device": name, "dtype": str(dtype), "tiny": args.tiny, "torch": torch.__version__,
              "bf16_peak_flops": peak, "args": vars(args), "encoding": None, "rerank": [], "readers": [],
              "loops": [], "table2_grid": None}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every stage: a run stopped at its time limit keeps what it measured
        for r in [result["encoding"], *result["rerank"], *result["readers"]]:
            if r and "flops_per_s" in r:
                r["peak_fraction"] = r["flops_per_s"] / peak if peak else None
        out.write_text(json.dumps(result, indent=2) + "\n")

    frac = lambda r: f"{100 * r['flops_per_s'] / peak:.1f}%" if peak else "n/a"  # noqa: E731
    print(f"device: {name} ({dtype}){' - TINY configs, not the paper sizes' if args.tiny else ''}", flush=True)
    encoding = result["encoding"] = _measured("encoding", bench_encoding, args, device, dtype, rng)
    if "error" not in encoding:  # each stage printed as it ends: a partial run says something
        print(f"encoding ({encoding['model']}): {encoding['sentences']:,} sentences, {encoding['sentences_per_s']:,.0f} "
              f"sentences/s, {encoding['tokens_per_s']:,.0f} tokens/s, {frac(encoding)} of peak (the first pass, every "
              f"batch shape new: {encoding['first_pass_seconds']:.1f} s against {encoding['seconds']:.1f}) -> 1M sentences in "
              f"{encoding['corpus_encode_hours']:.3f} h; flat index of {encoding['index_vectors']:,} vectors built in "
              f"{encoding['index_build_s']:.1f} s, 1,000 searches top-150 in "
              f"{encoding['search_1000_queries_top150_s']:.1f} s", flush=True)
        _print_profile(encoding["profile"])
    save()
    _free(device)
    for m in (m for m in args.rerankers.split(",") if m):
        r = _measured(f"rerank {m}", bench_reranker, m, args, device, dtype, rng)
        if "error" not in r:
            result["rerank"].append(r)
            print(f"rerank {r['model']:<9} {r['texts_per_s']:>9,.1f} texts/s {r['tokens_per_s']:>11,.0f} tokens/s "
                  f"{frac(r):>6} of peak (token budget {r['token_budget']:,})", flush=True)
        save()
        _free(device)
    readers = result["readers"]
    for m in (m for m in args.readers.split(",") if m):
        for variant in variants:
            r = _measured(f"reader {m} {variant}", bench_reader, m, args, device, variant)
            _free(device)
            if "error" in r:
                continue
            ref = next((x for x in readers if x["model"] == m), r)  # the model's first variant is the reference
            r["speedup"] = ref["s_per_step"] / r["s_per_step"]
            r["max_loss_diff"] = max(abs(a - b) for a, b in zip(r["losses"], ref["losses"], strict=True))
            readers.append(r)
            mem = f", {r['peak_memory_gib']:.1f} GiB" if r["peak_memory_gib"] else ""
            print(f"reader {r['model']:<9} {variant:<13} {r['s_per_step']:.3f} s/step (batch {r['batch']}, "
                  f"d={r['passages']}, {r['passage_tokens']} tokens{mem}) {frac(r)} of peak; "
                  f"{r['speedup']:.2f}x {ref['variant']}, losses within {r['max_loss_diff']:.1e}, "
                  f"warm-up {r['warmup_s']:.1f} s", flush=True)
            _print_profile(r["profile"])
            save()
        for variant in loop_variants:
            r = _measured(f"loop {m} {variant}", bench_train_loop, m, args, device, variant)
            _free(device)
            if "error" in r:
                continue
            step = next((x for x in readers if x["model"] == m and x["variant"] == variant), None)
            r["loop_overhead_s"] = r["s_per_step"] - step["s_per_step"] if step else None
            result["loops"].append(r)
            extra = f" (the model step alone {step['s_per_step']:.3f})" if step else ""
            print(f"loop   {m:<9} {variant:<13} {r['s_per_step']:.3f} s/step in pgra's training loop{extra}, "
                  f"warm-up {r['warmup_s']:.1f} s", flush=True)
            save()
    if readers and result["rerank"] and "error" not in encoding:
        fastest = min((r for r in readers if r["model"] == readers[0]["model"]), key=lambda r: r["s_per_step"])
        cost = result["table2_grid"] = grid_cost(encoding, result["rerank"][-1], fastest)
        print(f"Table 2 grid on this device: {cost['total_hours']:.1f} GPU h = index {cost['index_hours']:.2f} + "
              f"rerank ({cost['reranker']}, {cost['rerank_texts']:,} texts) {cost['rerank_hours']:.1f} + readers "
              f"({cost['reader']}, {cost['reader_variant']}) {cost['reader_hours']:.1f}")
    save()
    return result


if __name__ == "__main__":
    main()
