"""Dense (MiniLM + faiss) retrieval at corpus sizes up to a million sentences: build time, peak memory, search.

For each (size, encoder precision), in a child process of its own (so its peak memory is its own), it runs pgra's
own ``build_index`` stage (sharded encoding, then the merge into one faiss index, as ``pgra build-index`` does)
on the same corpus as ``bench_bm25_scale.py`` (the demo's sentences, then seeded perturbed copies), then loads
the index with :class:`pgra.Index` and searches 1,000 wiki_topic training inputs for the top k: the queries'
encoding and the faiss search are timed apart (the first is the same at every size). It also times a flat and
(with ``--hnsw``) an HNSW faiss build over the same vectors, and for a bf16 build the share of queries whose top k equals the fp32
build's at the same size (when both ran).

    python bench/bench_dense_scale.py --sizes 30000,100000,300000,1000000 --dtypes fp32,bf16 --json out.json
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_bm25_scale import make_corpus, measure_in_child  # noqa: E402


def measure(size: int, dtype: str, queries: list[str], k: int, keep: str, hnsw: bool, out) -> None:
    """One size at one encoder precision, in a child process: build, search; puts a dict on ``out``."""
    import torch

    from pgra.retrieval.dense import build_faiss, search_faiss
    from pgra.retrieval.index import DenseConfig, Index, IndexConfig, build_index

    torch.set_num_threads(torch.get_num_threads())
    base = Path(ROOT / "data/demo/wiki_sentences.txt").read_text(encoding="utf-8").splitlines()
    work = Path(tempfile.mkdtemp(prefix=f"dense{size}_"))
    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(make_corpus(base, size)) + "\n", encoding="utf-8")
    row: dict = {"docs": size, "dtype": dtype, "queries": len(queries), "k": k}
    cfg = IndexConfig(corpus=str(corpus), out=str(work / "index"), retriever="dense", show_progress=False,
                      dense=DenseConfig(encoder=str(ROOT / "models/minilm"), pooler="mean", max_length=128,
                                        batch_size=128, shard_size=8192, dtype=dtype, device="cpu"))
    t = time.perf_counter()
    build_index(cfg)
    row["build_s"] = time.perf_counter() - t
    row["build_peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    row["index_gib"] = sum(p.stat().st_size for p in (work / "index").rglob("*") if p.is_file()) / 2**30
    index = Index(work / "index", device="cpu", use_gpu_faiss=False)
    searcher = index.searcher
    searcher.encoder.encode(queries[:8])  # loads the encoder
    t = time.perf_counter()
    qvec = searcher.encoder.encode(queries)
    row["query_encode_s"] = time.perf_counter() - t
    search_faiss(searcher.faiss, qvec[:8], k)
    t = time.perf_counter()
    _, ids = search_faiss(searcher.faiss, qvec, k)
    row["search_s"] = time.perf_counter() - t
    vectors = searcher.faiss.reconstruct_n(0, searcher.faiss.ntotal)
    for kind in ("flat", "hnsw") if hnsw else ("flat",):
        t = time.perf_counter()
        built = build_faiss(vectors, kind)
        row[f"faiss_{kind}_build_s"] = time.perf_counter() - t
        if kind == "hnsw":
            search_faiss(built, qvec[:8], k)
            t = time.perf_counter()
            _, hnsw_ids = search_faiss(built, qvec, k)
            row["hnsw_search_s"] = time.perf_counter() - t
            row["hnsw_recall"] = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(ids, hnsw_ids, strict=True)]))
        del built
    row["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    if keep:
        np.save(Path(keep) / f"ids_{size}_{dtype}.npy", ids)
    shutil.rmtree(work)
    out.put(row)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="30000,100000,300000,1000000")
    ap.add_argument("--dtypes", default="fp32", help="encoder precisions, comma-separated (fp32, bf16)")
    ap.add_argument("--queries-file", default=str(ROOT / "data/demo/wiki_topic/train.jsonl"))
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=150)
    ap.add_argument("--hnsw", action="store_true", help="also build and search an HNSW index over the vectors")
    ap.add_argument("--json", default="", help="also write the rows to this file (rewritten after every row)")
    args = ap.parse_args()
    queries = [json.loads(x)["text"] for x in Path(args.queries_file).read_text().splitlines()][: args.queries]
    rows = []
    keep = tempfile.mkdtemp(prefix="dense_ids_")
    print("| sentences | encoder | build | of which faiss flat | peak RSS (build) | index on disk | "
          "search / query (faiss flat) | query encoding / query | HNSW build | HNSW search / query (recall) | "
          "top-k = fp32 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        for dtype in args.dtypes.split(","):
            row = measure_in_child(measure, size, dtype, queries, args.k, keep, args.hnsw)
            ref = Path(keep) / f"ids_{size}_fp32.npy"
            if dtype != "fp32" and ref.exists():
                a, b = np.load(ref), np.load(Path(keep) / f"ids_{size}_{dtype}.npy")
                row["same_topk_as_fp32"] = int(sum(set(x) == set(y) for x, y in zip(a, b, strict=True)))
                row["overlap_with_fp32"] = float(np.mean([len(set(x) & set(y)) / args.k for x, y in zip(a, b,
                                                                                                     strict=True)]))
            rows.append(row)
            n = row["queries"]
            same = (f"{row['same_topk_as_fp32']}/{n} (overlap {row['overlap_with_fp32']:.3f})"
                    if "same_topk_as_fp32" in row else "")
            hnsw = (f"{row['faiss_hnsw_build_s']:.0f} s | {row['hnsw_search_s'] / n * 1e3:.2f} ms "
                    f"({row['hnsw_recall']:.3f})" if "hnsw_recall" in row else " | ")
            print(f"| {size:,} | MiniLM {dtype} | {row['build_s']:.0f} s | {row['faiss_flat_build_s']:.2f} s | "
                  f"{row['build_peak_rss_gib']:.2f} GiB | {row['index_gib']:.2f} GiB | "
                  f"{row['search_s'] / n * 1e3:.2f} ms | {row['query_encode_s'] / n * 1e3:.2f} ms | "
                  f"{hnsw} | {same} |", flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(keep)


if __name__ == "__main__":
    main()
