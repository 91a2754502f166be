"""Dense retrieval benchmarks on the demo corpus with the packaged MiniLM encoder.

1. encoding throughput: ours vs sentence-transformers' `encode` (same model, sentences, batch size, length);
2. exact faiss search vs a numpy brute-force top-k: identical ids;
3. corpus store: `id -> text` for 150k random ids out of 1M sentences;
4. what a 1M-sentence build costs here, extrapolated from the measured encoding rate.

    python bench/bench_dense.py [--sentences 3000]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from pgra.data.corpus import CorpusSource, build_store
from pgra.retrieval.dense import build_faiss, search_faiss
from pgra.retrieval.encoder import DenseEncoder

ROOT = Path(__file__).resolve().parents[1]


def bench_encoding(texts: list[str], model: str, batch_size: int, max_length: int) -> float:
    from sentence_transformers import SentenceTransformer

    ours = DenseEncoder(model, pooler="mean", max_length=max_length, batch_size=batch_size)
    st = SentenceTransformer(model, device="cpu")
    st.max_seq_length = max_length
    ours.encode(texts[:64])
    st.encode(texts[:64])  # warm-up both
    t = time.perf_counter()
    a = ours.encode(texts)
    ours_s = time.perf_counter() - t
    t = time.perf_counter()
    b = st.encode(texts, batch_size=batch_size, normalize_embeddings=True)
    st_s = time.perf_counter() - t
    print(f"[encode] {len(texts)} sentences, batch {batch_size}, max_length {max_length}: "
          f"ours {len(texts) / ours_s:.0f}/s, sentence-transformers {len(texts) / st_s:.0f}/s -> "
          f"ratio {st_s / ours_s:.2f}x; max |diff| {np.abs(a - b).max():.1e}")
    return len(texts) / ours_s


def bench_search(vectors: np.ndarray, queries: np.ndarray, k: int) -> None:
    t = time.perf_counter()
    _, ids = search_faiss(build_faiss(vectors, "flat"), queries, k)
    faiss_s = time.perf_counter() - t
    t = time.perf_counter()
    sims = queries @ vectors.T
    part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(sims, part, axis=1), axis=1, kind="stable")
    ref = np.take_along_axis(part, order, axis=1)
    np_s = time.perf_counter() - t
    same = int((ids == ref).all(axis=1).sum())
    # rows that differ may only do so among equal scores
    tie_only = all(np.allclose(np.sort(sims[i, ids[i]]), np.sort(sims[i, ref[i]]), atol=1e-6)
                   for i in range(len(ids)) if not (ids[i] == ref[i]).all())
    print(f"[search] exact faiss vs numpy brute force, {len(queries)} queries x {len(vectors)} vectors, top-{k}: "
          f"identical ids for {same}/{len(queries)} queries (differences only among tied scores: {tie_only}); "
          f"faiss {faiss_s:.3f} s incl. build, numpy {np_s:.3f} s")


def bench_store(n: int = 1_000_000, lookups: int = 150_000) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.txt"
        rng = np.random.default_rng(0)
        words = np.array(["the", "of", "and", "to", "in", "a", "is", "was", "for", "on", "as", "with", "by", "he", "at", "from", "his", "an", "were", "are", "which"])
        with open(path, "w") as f:
            for i in range(n):
                f.write(" ".join(words[rng.integers(0, len(words), 20)]) + f" {i}.\n")
        t = time.perf_counter()
        store = build_store(CorpusSource(str(path)), Path(tmp) / "store", show_progress=False)
        build_s = time.perf_counter() - t
        ids = rng.integers(0, n, lookups)
        t = time.perf_counter()
        texts = store.texts(ids)
        look_s = time.perf_counter() - t
        assert texts[0].endswith(f" {ids[0]}.")
        print(f"[store] {n} sentences stored in {build_s:.1f} s; {lookups} random id -> text lookups in "
              f"{look_s:.3f} s")
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models/minilm"))
    ap.add_argument("--corpus", default=str(ROOT / "data/demo/wiki_sentences.txt"))
    ap.add_argument("--sentences", type=int, default=3000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=128)
    args = ap.parse_args()
    sents = Path(args.corpus).read_text(encoding="utf-8").splitlines()
    rng = np.random.default_rng(0)
    sample = [sents[i] for i in rng.choice(len(sents), args.sentences, replace=False)]
    rate = bench_encoding(sample, args.model, args.batch_size, args.max_length)

    enc = DenseEncoder(args.model, pooler="mean", max_length=args.max_length, batch_size=args.batch_size)
    vectors = enc.encode(sample)
    bench_search(vectors, vectors[:500], 150)
    bench_store()

    dim = vectors.shape[1]
    n = 1_000_000
    print(f"[1M build, MiniLM-L6 dim {dim}, this machine] encoding ~{n / rate / 3600:.1f} h at {rate:.0f} "
          f"sentences/s; flat index {n * dim * 4 / 2**30:.2f} GiB; peak memory of the merge step ~2x that "
          f"(shards concatenated + faiss copy); peak RSS of this benchmark {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
