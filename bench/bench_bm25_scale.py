"""BM25 at corpus sizes up to a million sentences: build time, peak memory, search time per query.

For each size, in a child process of its own (so its peak memory is its own), it builds ``okapi`` (the paper's
BM25) and ``lucene`` (bm25s's default scoring) and searches the same queries for the top k with:
- ours, compiled (``BM25Index.search`` with numba: dense accumulation and a heap top-k, one thread per query;
  also timed on one thread),
- ours, sparse product (``compiled=False``: the scipy path the compiled one replaces),
- bm25s (``bm25s.BM25(method="lucene")``, its numpy backend) on the same lowercased word tokens as ``lucene``.
Compiled and sparse-product searches must return the same ids and scores bit for bit (checked on every query);
``lucene`` is checked against bm25s's own top k up to tied scores.

The corpus: the demo's 29,790 Wikipedia sentences, then copies of them in which each word is replaced, with
probability 0.3, by a word drawn from the corpus's own word frequencies (seeded): sentence lengths, word
frequencies and most of each sentence's topic stay real, and no copy repeats a sentence.

    python bench/bench_bm25_scale.py --sizes 30000,100000,300000,1000000 --queries 1000 --k 150
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def make_corpus(base: list[str], size: int, seed: int = 0, swap: float = 0.3) -> list[str]:
    """``size`` sentences: ``base`` first, then perturbed copies of it (each word swapped with probability
    ``swap`` for a word drawn from the corpus's word frequencies)."""
    rng = np.random.default_rng(seed)
    words = [w for s in base for w in s.split(" ")]
    vocab, counts = np.unique(np.array(words, dtype=object).astype(str), return_counts=True)
    cdf = (counts / counts.sum()).cumsum()
    cdf /= cdf[-1]  # what rng.choice(vocab, p=...) draws with, computed once
    out = list(base[:size])
    while len(out) < size:
        for s in base:
            if len(out) == size:
                break
            toks = s.split(" ")
            swap_at = rng.random(len(toks)) < swap
            if swap_at.any():
                new = vocab[cdf.searchsorted(rng.random(int(swap_at.sum())), side="right")]
                it = iter(new.tolist())
                toks = [next(it) if m else t for t, m in zip(toks, swap_at, strict=True)]
            out.append(" ".join(toks))
    return out


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def measure(size: int, queries: list[str], k: int, out: mp.Queue) -> None:
    """One size, in a child process: builds, searches, agreement; puts a dict on ``out``."""
    import bm25s
    import numba

    from pgra.retrieval.bm25 import BM25Config, BM25Index, tokenize

    base = Path(ROOT / "data/demo/wiki_sentences.txt").read_text(encoding="utf-8").splitlines()
    docs = make_corpus(base, size)
    row: dict = {"docs": size, "queries": len(queries), "k": k}
    for method in ("okapi", "lucene"):
        idx, row[f"{method}_build_s"] = _timed(lambda m=method: BM25Index.build(docs, BM25Config(method=m),
                                                                                 show_progress=False))
        idx.search(queries[:2], k, compiled=True)  # compiles once (numba caches it on disk)
        (scores, ids), row[f"{method}_compiled_s"] = _timed(lambda i=idx: i.search(queries, k, compiled=True))
        threads = numba.get_num_threads()
        numba.set_num_threads(1)
        _, row[f"{method}_one_thread_s"] = _timed(lambda i=idx: i.search(queries, k, compiled=True))
        numba.set_num_threads(threads)
        (full_scores, full_ids), row[f"{method}_full_s"] = _timed(lambda i=idx: i.search(queries, k, compiled=False))
        row[f"{method}_compiled_equals_full"] = sum(np.array_equal(a, b) and np.array_equal(c, d) for a, b, c, d in
                                                  zip(ids, full_ids, scores, full_scores, strict=True))
        if method == "lucene":
            ref = bm25s.BM25(method="lucene")
            tokens = [tokenize(d, "word_lower") for d in docs]
            _, row["bm25s_build_s"] = _timed(lambda r=ref, t=tokens: r.index(t, show_progress=False))
            qtok = [tokenize(q, "word_lower") or ["\x00"] for q in queries]
            (ref_ids, ref_scores), row["bm25s_search_s"] = _timed(
                lambda r=ref, t=qtok: r.retrieve(t, k=k, show_progress=False, n_threads=1))
            row["lucene_equals_bm25s"] = sum(np.allclose(np.sort(s)[::-1], np.sort(r)[::-1], rtol=1e-5)
                                             for s, r in zip(scores, ref_scores, strict=True))
            del tokens, ref
        del idx
    row["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    out.put(row)


def measure_in_child(target, *args) -> dict:
    """``target(*args, queue)`` in a spawned process of its own (its peak memory is its own); the dict it puts on the
    queue. Raises when the process died without one (an error, or killed for memory)."""
    import queue

    q = mp.get_context("spawn").Queue()
    p = mp.get_context("spawn").Process(target=target, args=(*args, q))
    p.start()
    while True:
        try:
            row = q.get(timeout=5)
            p.join()
            return row
        except queue.Empty:
            if not p.is_alive():
                raise RuntimeError(f"the measuring process exited with code {p.exitcode} without a result") from None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="30000,100000,300000,1000000")
    ap.add_argument("--queries-file", default=str(ROOT / "data/demo/wiki_topic/train.jsonl"))
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=150)
    ap.add_argument("--json", default="", help="also write the rows to this file")
    args = ap.parse_args()
    queries = [json.loads(x)["text"] for x in Path(args.queries_file).read_text().splitlines()][: args.queries]
    rows = []
    print("| sentences | method | build | search / query: compiled (2 threads) | compiled, 1 thread | "
          "sparse product (speed-up) | bm25s (speed-up) | compiled = sparse product | "
          "= bm25s (same top-k scores) | peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        row = measure_in_child(measure, size, queries, args.k)
        rows.append(row)
        n = row["queries"]
        for m in ("okapi", "lucene"):
            speedup = row[f"{m}_full_s"] / row[f"{m}_compiled_s"]
            ref = (f"{row['bm25s_search_s'] / n * 1e3:.2f} ms ({row['bm25s_search_s'] / row[f'{m}_compiled_s']:.1f}x)"
                   if m == "lucene" else "")
            agree = f"{row['lucene_equals_bm25s']}/{n}" if m == "lucene" else ""
            print(f"| {size:,} | {m} | {row[f'{m}_build_s']:.1f} s | {row[f'{m}_compiled_s'] / n * 1e3:.2f} ms | "
                  f"{row[f'{m}_one_thread_s'] / n * 1e3:.2f} ms | "
                  f"{row[f'{m}_full_s'] / n * 1e3:.2f} ms ({speedup:.1f}x) | {ref} | "
                  f"{row[f'{m}_compiled_equals_full']}/{n} | {agree} | {row['peak_rss_gib']:.2f} GiB |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
