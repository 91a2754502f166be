"""``pgra``: one subcommand per stage (see ``pgra -h``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .errors import PgraError


def _overrides(args: argparse.Namespace, mapping: dict[str, str]) -> dict[str, Any]:
    """Nested override dict from explicitly given flags (flag dest -> dotted config key) + key=value extras."""
    from .config import merge, parse_overrides

    out: dict[str, Any] = parse_overrides(getattr(args, "set", None) or [])
    for dest, key in mapping.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        node = {}
        cur = node
        *parents, leaf = key.split(".")
        for p in parents:
            cur = cur.setdefault(p, {})
        cur[leaf] = value
        out = merge(out, node)
    return out


# ------------------------------------------------------------------------------------------ subcommands

def cmd_prepare_demo(args: argparse.Namespace) -> None:
    from .demo.prepare import prepare_demo

    prepare_demo(args.models_dir, args.data_dir, force=args.force)


def cmd_download_data(args: argparse.Namespace) -> None:
    from .download import download

    download(args.what, args.data_dir, timeout=args.timeout)


BUILD_FLAGS = {"corpus": "corpus", "corpus_format": "corpus_format", "out": "out", "retriever": "retriever",
               "encoder": "dense.encoder", "pooler": "dense.pooler", "index_type": "dense.index_type",
               "max_length": "dense.max_length", "batch_size": "dense.batch_size", "device": "dense.device",
               "shard_size": "dense.shard_size", "bm25_method": "bm25.method", "overwrite": "overwrite"}


def cmd_build_index(args: argparse.Namespace) -> None:
    from .config import load_config
    from .retrieval.index import IndexConfig, build_index

    cfg = load_config(IndexConfig, args.config, _overrides(args, BUILD_FLAGS))
    ctx, out = _run_distributed(build_index, cfg)
    if ctx.is_main:
        manifest = json.loads((Path(out) / "manifest.json").read_text())
        extra = (f"{manifest['encoder']} ({manifest['pooler']}), dim {manifest['dim']}, {manifest['index_type']}"
                 if manifest["retriever"] == "dense" else f"BM25 {manifest['bm25']['method']}")
        print(f"index ready: {out} ({manifest['size']} texts; {extra})")


RETRIEVE_FLAGS = {"task": "task", "index": "index", "out": "out", "k": "k", "splits": "splits",
                  "data_dir": "data_dir", "max_examples": "max_examples", "device": "device"}
RERANK_FLAGS = {"candidates": "candidates", "out": "out", "lm": "lm", "task": "task", "index": "index",
                "top_d": "top_d", "k": "k", "num_demos": "num_demos", "demo_selection": "demo_selection",
                "seed": "seed", "splits": "splits", "cache_dir": "cache_dir", "device": "device", "dtype": "dtype"}


def _run_distributed(fn, cfg) -> Any:
    from .distributed import init_distributed, shutdown_distributed

    ctx = init_distributed()
    try:
        return ctx, fn(cfg, ctx)
    finally:
        shutdown_distributed()


def cmd_retrieve(args: argparse.Namespace) -> None:
    from .config import load_config
    from .retrieval.retrieve import RetrieveConfig, retrieve

    cfg = load_config(RetrieveConfig, args.config, _overrides(args, RETRIEVE_FLAGS))
    ctx, out = _run_distributed(retrieve, cfg)
    if ctx.is_main:
        counts = json.loads((Path(out) / "manifest.json").read_text())["counts"]
        print(f"candidates ready: {out} (top-{cfg.k}; " + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")")


def cmd_rerank(args: argparse.Namespace) -> None:
    from .config import load_config
    from .rerank.reranker import RerankConfig, rerank

    cfg = load_config(RerankConfig, args.config, _overrides(args, RERANK_FLAGS))
    ctx, out = _run_distributed(rerank, cfg)
    if ctx.is_main:
        m = json.loads((Path(out) / "manifest.json").read_text())
        e = m["embedding"]
        print(f"reranked: {out} (top-{m['top_d']} of {m['k']}; " + ", ".join(f"{k} {v}" for k, v in m["counts"].items())
              + f"; {e['evidence_rows']} evidence sentences, {e['evidence_cache_hits']} from the cache, "
              f"{e['tokens_run']} LM tokens run, {e['truncated']} truncated)")


TRAIN_FLAGS = {"data": "data", "out": "out", "model": "model", "task": "task", "n_passages": "n_passages",
               "max_steps": "max_steps", "batch_size": "batch_size", "learning_rate": "learning_rate",
               "eval_every": "eval_every", "seed": "seed", "input_format": "input_format",
               "mixed_precision": "mixed_precision", "predict_mode": "predict_mode"}


def cmd_train(args: argparse.Namespace) -> None:
    from .config import load_config
    from .reader.train import TrainConfig, train

    cfg = load_config(TrainConfig, args.config, _overrides(args, TRAIN_FLAGS))
    results = train(cfg)
    for split, r in results.items():
        extra = f", {r['invalid_predictions']} invalid" if r["invalid_predictions"] else ""
        print(f"{split}: " + ", ".join(f"{k} {v:.4f}" for k, v in r.items() if isinstance(v, float))
              + f" ({r['examples']} examples{extra})")


def cmd_peek(args: argparse.Namespace) -> None:
    from .interchange import read_records

    path = Path(args.path)
    if path.is_dir():
        path = path / f"{args.split}.jsonl"
    for n, rec in enumerate(read_records(path)):
        if n == args.n:
            break
        label = f"  [label {rec['label']}]" if "label" in rec else ""
        print(f"{rec['id']}: {rec['text']}{label}")
        for j, c in enumerate(rec.get("ctxs", [])[: args.d], start=1):
            first = f" (first-stage rank {c['retrieval_rank']})" if "retrieval_rank" in c else ""
            print(f"  {j:>3}. [{c['id']}] {float(c.get('score', 0)):.4f}{first}  {c['text']}")
        print()


def cmd_search(args: argparse.Namespace) -> None:
    from .corpus import CorpusSource
    from .retrieval.index import Index

    queries = list(args.query or [])
    if args.queries_file:
        path = Path(args.queries_file)
        if not path.is_file():
            raise PgraError(f"{path}: queries file not found")
        queries += [q for q in path.read_text(encoding="utf-8").splitlines() if q.strip()]
    if not queries:
        raise PgraError("no query: pass --query TEXT (repeatable) or --queries-file FILE")
    corpus = CorpusSource(args.corpus) if args.corpus else None
    index = Index(args.index, encoder=args.encoder, corpus=corpus, verify=not args.no_verify, device=args.device)
    results = index.search_hits(queries, args.k)
    for qi, (query, hits) in enumerate(zip(queries, results, strict=True)):
        if args.json:
            for rank, hit in enumerate(hits, start=1):
                print(json.dumps({"query": query, "rank": rank, **hit}, ensure_ascii=False))
            continue
        if qi:
            print()
        print(f"query: {query}")
        for rank, hit in enumerate(hits, start=1):
            print(f"{rank:>4}  {hit['id']!s:>10}  {hit['score']:.4f}  {hit['text']}")


def cmd_tasks(args: argparse.Namespace) -> None:
    from .tasks import get_task, list_tasks

    if args.action == "list" or args.action is None:
        for t in list_tasks():
            print(f"{t.name:<11} {len(t.labels)} labels  {t.metric:<9} {t.description}")
        return
    if not args.name:
        raise PgraError(f"`pgra tasks {args.action}` needs a task name or YAML path")
    task = get_task(args.name)
    if args.action == "show":
        _show_task(task, args.data_dir)
    elif args.action == "export":
        _export_task(task, args.data_dir, args.out)


def _show_task(task: Any, data_dir: str) -> None:
    from .rerank.prompts import build_prompt
    from .tasks import load_task

    print(f"task: {task.name}  ({task.description or task.source})")
    print(f"metric: {task.metric}")
    print("labels (value: demonstration word / reader word):")
    for lab in task.labels:
        print(f"  {lab}: {task.demo_words[lab]} / {task.reader_words[lab]}")
    print("\nreranker template P(text):")
    print(task.rerank_template)
    print("\nreader input format:")
    print(task.reader_template)
    try:
        data = load_task(task, data_dir, splits=("train",))
    except PgraError as e:
        print(f"\n(no example prompt: {e})")
        return
    train = data["train"]
    demos, seen = [], set()
    for ex in train:
        if ex.label not in seen:
            demos.append(ex)
            seen.add(ex.label)
        if len(demos) == min(2, task.num_labels):
            break
    query = next(ex for ex in train if ex not in demos)
    print(f"\nexample reranker prompt ({len(demos)} demonstrations from train, then a training sentence):")
    print("-" * 60)
    print(build_prompt(task, demos, query.text))
    print("-" * 60)


def _export_task(task: Any, data_dir: str, out: str | None) -> None:
    from .artifacts import write_manifest
    from .config import to_dict
    from .interchange import example_record, write_records
    from .tasks import load_task

    if not out:
        raise PgraError("`pgra tasks export` needs --out DIR")
    data = load_task(task, data_dir)
    out_dir = Path(out)
    (out_dir / "manifest.json").unlink(missing_ok=True)
    counts = {}
    for split, examples in data.splits.items():
        counts[split] = write_records(out_dir / f"{split}.jsonl", (example_record(ex) for ex in examples))
    write_manifest(out_dir, {"kind": "task-data", "task": to_dict(task), "counts": counts,
                             "provenance": data.provenance})
    print(f"exported {task.name} to {out_dir}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


# ------------------------------------------------------------------------------------------ parser

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pgra", description="Prompt-Guided Retrieval Augmentation (PGRA) pipeline")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("prepare-demo", help="prepare the offline demo models and Wikipedia data")
    s.add_argument("--models-dir", default="models")
    s.add_argument("--data-dir", default="data")
    s.add_argument("--force", action="store_true", help="rebuild even if up to date")
    s.set_defaults(func=cmd_prepare_demo)

    s = sub.add_parser("download-data", help="download LM-BFF's task data and Wiki1M (needs the internet)")
    s.add_argument("what", nargs="*", default=["lmbff", "wiki1m"], help="lmbff and/or wiki1m")
    s.add_argument("--data-dir", default="data")
    s.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for a connection")
    s.set_defaults(func=cmd_download_data)

    s = sub.add_parser("build-index", help="stage 1: index a corpus with a dense encoder + faiss, or BM25")
    s.add_argument("--config", help="YAML config (configs/demo/..., configs/paper/...)")
    s.add_argument("--corpus", help="txt (one sentence a line), .jsonl ({id, text}) or HF dataset")
    s.add_argument("--corpus-format", choices=["auto", "txt", "jsonl", "hf"])
    s.add_argument("--retriever", choices=["dense", "bm25"])
    s.add_argument("--encoder", help="HF encoder name or local folder (dense)")
    s.add_argument("--pooler", choices=["cls", "cls_before_pooler", "mean"])
    s.add_argument("--index-type", choices=["flat", "ivf", "hnsw"])
    s.add_argument("--max-length", type=int)
    s.add_argument("--batch-size", type=int)
    s.add_argument("--shard-size", type=int, help="texts per resumable shard")
    s.add_argument("--device", help="auto (default), cpu, cuda, cuda:1 ...")
    s.add_argument("--bm25-method", choices=["okapi", "lucene", "robertson", "atire", "bm25l", "bm25+"])
    s.add_argument("--out", help="index folder to write")
    s.add_argument("--overwrite", action="store_true", default=None,
                   help="replace an index or partial build made with other inputs")
    s.add_argument("set", nargs="*", help="extra config overrides key=value (e.g. dense.faiss.nlist=4096)")
    s.set_defaults(func=cmd_build_index)

    s = sub.add_parser("retrieve", help="stage 1b: top-k candidates for every input of a task")
    s.add_argument("--config")
    s.add_argument("--task", help="registered task name or task YAML")
    s.add_argument("--index", help="index folder from build-index")
    s.add_argument("--out", help="candidates folder to write")
    s.add_argument("-k", type=int, help="candidates per input (default 150)")
    s.add_argument("--splits", help="comma-separated (default train,dev,test)")
    s.add_argument("--data-dir")
    s.add_argument("--max-examples", type=int, help="first N inputs per split (smoke runs)")
    s.add_argument("--device")
    s.add_argument("set", nargs="*", help="extra config overrides key=value")
    s.set_defaults(func=cmd_retrieve)

    s = sub.add_parser("rerank", help="stage 2: prompt-guided reranking with a causal LM")
    s.add_argument("--config")
    s.add_argument("--candidates", help="folder from `pgra retrieve`")
    s.add_argument("--out", help="reranked folder to write")
    s.add_argument("--lm", help="causal LM name or local folder (OPT, Llama, GPT-2 ...)")
    s.add_argument("--task", help="defaults to the task recorded with the candidates")
    s.add_argument("--index", help="defaults to the index recorded with the candidates")
    s.add_argument("--top-d", type=int, help="evidence kept per input (default 16)")
    s.add_argument("-k", type=int, help="rerank only the first k candidates (default: all)")
    s.add_argument("--num-demos", type=int, help="demonstrations in the prompt (default 8)")
    s.add_argument("--demo-selection", choices=["paper", "code"])
    s.add_argument("--seed", type=int)
    s.add_argument("--splits")
    s.add_argument("--cache-dir", help="evidence-embedding cache (default cache/embeddings)")
    s.add_argument("--device")
    s.add_argument("--dtype", choices=["auto", "fp32", "fp16", "bf16"])
    s.add_argument("set", nargs="*", help="extra config overrides key=value (e.g. max_tokens_per_batch=8192)")
    s.set_defaults(func=cmd_rerank)

    s = sub.add_parser("train", help="stage 3: train + evaluate the Fusion-in-Decoder reader (accelerate)")
    s.add_argument("--config")
    s.add_argument("--data", help="reranked (or candidates) folder")
    s.add_argument("--out", help="run folder (checkpoints, best/, metrics.json)")
    s.add_argument("--model", help="encoder-decoder name or folder (t5-base, models/bert2bert-minilm ...)")
    s.add_argument("--task")
    s.add_argument("--n-passages", type=int, help="d evidence sentences per input; 0 = no retrieval")
    s.add_argument("--max-steps", type=int)
    s.add_argument("--batch-size", type=int, help="global batch per step")
    s.add_argument("--learning-rate", type=float)
    s.add_argument("--eval-every", type=int)
    s.add_argument("--seed", type=int)
    s.add_argument("--input-format", choices=["intended", "released", "fid"])
    s.add_argument("--mixed-precision", choices=["no", "fp16", "bf16"])
    s.add_argument("--predict-mode", choices=["scoring", "generate"])
    s.add_argument("set", nargs="*", help="extra config overrides key=value (e.g. grad_accum=4)")
    s.set_defaults(func=cmd_train)

    s = sub.add_parser("peek", help="print the first inputs of an interchange file with their evidence")
    s.add_argument("path", help="a .jsonl file, or a candidates/reranked folder")
    s.add_argument("--split", default="test")
    s.add_argument("-n", type=int, default=2, help="inputs to show")
    s.add_argument("-d", type=int, default=3, help="evidence sentences per input")
    s.set_defaults(func=cmd_peek)

    s = sub.add_parser("search", help="search an index from the command line")
    s.add_argument("--index", required=True)
    s.add_argument("--query", action="append", help="query text (repeatable)")
    s.add_argument("--queries-file", help="file with one query a line")
    s.add_argument("-k", type=int, default=10)
    s.add_argument("--json", action="store_true", help="JSON lines with query, rank, id, score, text")
    s.add_argument("--encoder", help="the index's encoder at a new location (checked against the manifest)")
    s.add_argument("--corpus", help="check that this corpus file is the one the index was built from")
    s.add_argument("--device")
    s.add_argument("--no-verify", action="store_true", help="skip the checksum of the index files")
    s.set_defaults(func=cmd_search)

    s = sub.add_parser("tasks", help="list tasks; `tasks show NAME`; `tasks export NAME --out DIR`")
    s.add_argument("action", nargs="?", choices=["list", "show", "export"])
    s.add_argument("name", nargs="?", help="registered task name or path of a task YAML file")
    s.add_argument("--data-dir", default="data")
    s.add_argument("--out")
    s.set_defaults(func=cmd_tasks)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except PgraError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; finished work is kept and a re-run resumes", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
