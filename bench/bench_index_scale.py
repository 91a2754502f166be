"""Index types at growing corpus sizes, on stored vectors: build time, peak memory, disk, search, recall@k.

Vectors: the demo corpus's sentences (data/demo/wiki_sentences.txt) encoded once with MiniLM (mean pooling,
max_length 128; cached in ``--cache``), then seeded perturbed copies (each vector plus Gaussian noise, unit norm
again) up to each size, written as the encoder's shards would be (``.build/emb_*.npy``). Queries: the wiki_topic
training inputs, encoded the same way. For each (size, index type), in a child process of its own (its peak RSS
is its own), pgra's :func:`~pgra.retrieval.dense_build.write_dense_index` indexes the shards as ``pgra
build-index`` does after encoding, then the index is loaded and the queries searched for the top k; recall@k is
measured against exact search (the sharded flat index's ids, the same as one flat index's).

    python bench/bench_index_scale.py --sizes 30000,100000,300000 --json bench/results/index_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_bm25_scale import measure_in_child  # noqa: E402

SHARD = 65536
# name -> (index_type, bounded_memory, keeps the vectors to re-score); an ivfpq build is searched twice: its own
# scores, and its top k x 4 re-scored from the stored vectors ("ivfpq+rescore4")
TYPES = {
    "flat": ("flat", False, False),  # in memory: today's default
    "flat-sharded": ("flat", True, False),
    "ivf-ondisk": ("ivf", True, False),
    "ivfsq8-ondisk": ("ivfsq8", True, False),
    "ivfpq-ondisk": ("ivfpq", True, True),
}
RESCORE = 4


def encode(texts: list[str]) -> np.ndarray:
    from pgra.retrieval.encoder import DenseEncoder

    encoder = DenseEncoder(str(ROOT / "models/minilm"), pooler="mean", max_length=128, batch_size=128,
                           device="cpu", dtype="bf16-if-native")
    return np.asarray(encoder.encode(texts), dtype=np.float32)


def stored_vectors(cache: Path, n_queries: int) -> tuple[np.ndarray, np.ndarray]:
    """The demo corpus's and the queries' MiniLM vectors (encoded once, then read from ``cache``)."""
    if cache.exists():
        data = np.load(cache)
        if len(data["queries"]) >= n_queries:
            return data["corpus"], data["queries"][:n_queries]
    corpus = (ROOT / "data/demo/wiki_sentences.txt").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in (ROOT / "data/demo/wiki_topic/train.jsonl").read_text().splitlines()]
    vectors, queries = encode(corpus), encode([r["text"] for r in rows[:n_queries]])
    np.savez(cache, corpus=vectors, queries=queries)
    return vectors, queries


def write_shards(real: np.ndarray, size: int, folder: Path, noise: float) -> None:
    """``size`` vectors as shards: the real ones, then perturbed copies (seeded by position), never all in memory."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i, start in enumerate(range(0, size, SHARD)):
        pos = np.arange(start, min(size, start + SHARD))
        x = real[pos % len(real)].copy()
        copies = pos >= len(real)
        x[copies] += noise * rng.standard_normal((int(copies.sum()), real.shape[1]), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        np.save(folder / f"emb_{i:05d}.npy", x.astype(np.float32))


class AnonPeak:
    """The peak of this process's anonymous resident memory (``RssAnon``: its heap, what a build allocates), sampled
    every 20 ms in a thread. ``ru_maxrss`` also counts the file-backed pages of memory-mapped shards and inverted
    lists, page cache the kernel drops under pressure, so a bounded build that reads 1.4 GiB of shards through mmap
    shows 1.4 GiB more there without holding it."""

    def __init__(self) -> None:
        import threading

        self.peak, self._stop = self.now(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    @staticmethod
    def now() -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssAnon:"))

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.now())

    def stop(self) -> float:
        """The peak so far, in GiB (sampling stops)."""
        self._stop.set()
        self._thread.join()
        return max(self.peak, self.now()) / 2**30


def measure(name: str, size: int, shards: str, queries: np.ndarray, k: int, train_size: int, out) -> None:
    """Index the shards as one type (hard links of them: a bounded flat build moves its shards), search, report."""
    from pgra.retrieval.dense import FaissParams, load_faiss
    from pgra.retrieval.dense_build import FAISS_FILE, IVFDATA_FILE, write_dense_index
    from pgra.retrieval.dense_retriever import DenseConfig
    from pgra.retrieval.shards import VectorShards, search_index

    kind, bounded, keep = TYPES[name]
    work = Path(tempfile.mkdtemp(dir=Path(shards).parent))
    build, index_dir = work / "build", work / "index"
    build.mkdir()
    index_dir.mkdir()
    for f in sorted(Path(shards).glob("emb_*.npy")):
        os.link(f, build / f.name)
    d = DenseConfig(index_type=kind, bounded_memory=bounded, rescore=RESCORE if keep else 0, shard_size=SHARD,
                    faiss=FaissParams(recall_queries=0, train_size=train_size))
    anon = AnonPeak()
    t0 = time.perf_counter()
    files, fields = write_dense_index(d, size, build, index_dir, show=False)
    build_s = time.perf_counter() - t0
    build_anon = anon.stop()
    build_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    index_bytes = sum(f.stat().st_size for f in index_dir.rglob("*") if f.is_file() and
                      (FAISS_FILE not in files or f.parent == index_dir))  # stored vectors apart when kept
    stored = VectorShards([index_dir / s for s in fields["vectors"]["shards"]]) if "vectors" in fields else None
    rows, index = [], None
    for factor in ([0, RESCORE] if keep else [0]):
        t0 = time.perf_counter()
        if FAISS_FILE in files:
            index = load_faiss(index_dir / FAISS_FILE, d.faiss, on_disk=IVFDATA_FILE in files)
            _, ids = search_index(index, queries, k, stored, factor)
        else:
            _, ids = stored.search(queries, k)
        search_s = time.perf_counter() - t0
        rows.append({"type": name + (f"+rescore{factor}" if factor else ""), "size": size,
                     "build_s": round(build_s, 2), "build_peak_rss_gib": round(build_rss, 3),
                     "build_peak_anon_gib": round(build_anon, 3),
                     "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
                     "index_disk_gib": round(index_bytes / 2**30, 4),
                     "stored_vectors_gib": round(size * queries.shape[1] * 4 / 2**30, 4) if factor else 0.0,
                     "search_ms_per_query": round(1000 * search_s / len(queries), 3), "ids": ids.tolist()})
    del index, stored
    shutil.rmtree(work)  # at 10M sentences every type's files together would not fit the disk
    out.put(rows)


def recall(found: list, exact: list) -> float:
    return float(np.mean([len(set(f) & set(e)) / len(e) for f, e in zip(found, exact, strict=True)]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="30000,100000,300000")
    ap.add_argument("--types", default=",".join(TYPES), help="comma-separated names of TYPES")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=150)
    ap.add_argument("--train-size", type=int, default=65536, help="IVF training sample (dense.faiss.train_size)")
    ap.add_argument("--noise", type=float, default=0.01, help="per-dimension std of a copy's perturbation")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "pgra_minilm_demo_vectors.npz"))
    ap.add_argument("--json", default="", help="also write the rows to this file")
    args = ap.parse_args()
    real, queries = stored_vectors(Path(args.cache), args.queries)
    print(f"{len(real)} demo vectors, {len(queries)} queries, dim {real.shape[1]}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in [int(s) for s in args.sizes.split(",")]:
            shards = Path(tmp) / f"shards-{size}"
            write_shards(real, size, shards, args.noise)
            exact = None
            for name in ["flat-sharded"] + [t for t in args.types.split(",") if t in TYPES and t != "flat-sharded"]:
                for row in measure_in_child(measure, name, size, str(shards), queries, args.k, args.train_size):
                    ids = row.pop("ids")
                    exact = exact or ids
                    row["recall_at_k"] = round(recall(ids, exact), 4)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"k": args.k, "noise": args.noise, "shard_size": SHARD,
                                               "train_size": args.train_size,
                                               "rows": rows}, indent=1) + "\n")
    print(f"\n| sentences | index | build | peak anonymous memory (build) | peak RSS (build) | index on disk | "
          f"search per query | recall@{args.k} |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['size']:,} | {r['type']} | {r['build_s']:.1f} s | {r['build_peak_anon_gib']:.2f} GiB | "
              f"{r['build_peak_rss_gib']:.2f} GiB | "
              f"{r['index_disk_gib']:.3f} GiB | {r['search_ms_per_query']:.2f} ms | {r['recall_at_k']:.3f} |")


if __name__ == "__main__":
    main()
