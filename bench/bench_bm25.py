"""BM25 `okapi` mode vs rank_bm25's BM25Okapi on the demo corpus: identical top-k ids, speed ratio.

    python bench/bench_bm25.py [--queries 1000] [--k 150]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from rank_bm25 import BM25Okapi

from pgra.retrieval.bm25 import BM25Config, BM25Index, topk_positions

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=str(ROOT / "data/demo/wiki_sentences.txt"))
    ap.add_argument("--queries-file", default=str(ROOT / "data/demo/wiki_topic/train.jsonl"))
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=150)
    args = ap.parse_args()
    docs = Path(args.corpus).read_text(encoding="utf-8").splitlines()
    queries = [json.loads(x)["text"] for x in Path(args.queries_file).read_text().splitlines()][: args.queries]
    print(f"corpus: {len(docs)} sentences; {len(queries)} queries; top-{args.k}")

    t = time.perf_counter()
    ours = BM25Index.build(docs, BM25Config(method="okapi"), show_progress=False)
    ours_build = time.perf_counter() - t
    t = time.perf_counter()
    ref = BM25Okapi([d.split(" ") for d in docs])
    ref_build = time.perf_counter() - t

    t = time.perf_counter()
    our_scores, our_ids = ours.search(queries, args.k)
    ours_search = time.perf_counter() - t

    t = time.perf_counter()
    ref_rows = [ref.get_scores(q.split(" ")) for q in queries]
    ref_search = time.perf_counter() - t

    identical, tie_equivalent, max_rel = 0, 0, 0.0
    for q_ids, q_scores, ref_row in zip(our_ids, our_scores, ref_rows, strict=True):
        ref_ids = topk_positions(ref_row, args.k)  # same tie-break (score, then position) on rank_bm25's scores
        identical += int(np.array_equal(q_ids, ref_ids))
        # where the lists differ, is it only the order of documents whose scores are equal up to rounding
        # (summing the same terms in another order)? compare rank_bm25's own scores rank by rank
        tie_equivalent += int(np.allclose(ref_row[q_ids], ref_row[ref_ids], rtol=1e-9, atol=0))
        denom = np.maximum(np.abs(ref_row[q_ids]), 1e-12)
        max_rel = max(max_rel, float(np.max(np.abs(q_scores - ref_row[q_ids]) / denom)))
    print(f"identical top-{args.k} ids: {identical}/{len(queries)} queries; identical up to the order of "
          f"documents with equal scores (1e-9 relative): {tie_equivalent}/{len(queries)}")
    print(f"max relative score difference over the returned documents: {max_rel:.2e}")
    print(f"index build: ours {ours_build:.2f} s, rank_bm25 {ref_build:.2f} s")
    print(f"search {len(queries)} queries: ours {ours_search:.2f} s, rank_bm25 {ref_search:.2f} s "
          f"-> ours is {ref_search / ours_search:.0f}x faster")


if __name__ == "__main__":
    main()
