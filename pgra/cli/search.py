"""``pgra search``: query an index from the command line."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..core.config import MAX_ITEMS, option
from ..core.errors import InputError
from .command import Command, read_texts


@dataclass
class SearchOptions:
    index: str = option("", exists="dir", help="index folder from build-index (required)")
    query: list[str] = option(default_factory=list, append=True, help="query text (repeatable)")
    queries_file: str = option("", exists="file", help="file with one query a line")
    k: int = option(10, flag="-k", min=1, max=MAX_ITEMS, help="hits per query")
    json: bool = option(False, help="JSON lines with query, rank, id, score, text")
    encoder: str = option("", help="the index's encoder at a new location (checked against the manifest)")
    corpus: str = option("", help="check that this corpus file is the one the index was built from")
    device: str = option("auto", help="auto, cpu, cuda ...")
    verify: bool = option(True, help="checksum the index files before searching")
    trust_remote_code: bool = option(False, help="let the index's encoder run its own code (a manifest never can)")


def run(opts: SearchOptions) -> None:
    from ..data.corpus import CorpusSource
    from ..retrieval.index import Index

    if not opts.index:
        raise InputError("pass the index folder with --index", field="index")
    queries = read_texts(opts.query, opts.queries_file, "query", "--query", "--queries-file")
    corpus = CorpusSource(opts.corpus) if opts.corpus else None
    index = Index(opts.index, encoder=opts.encoder or None, corpus=corpus, verify=opts.verify, device=opts.device,
                  trust_remote_code=opts.trust_remote_code)
    for qi, (query, hits) in enumerate(zip(queries, index.search_hits(queries, opts.k), strict=True)):
        if opts.json:
            for rank, hit in enumerate(hits, start=1):
                print(json.dumps({"query": query, "rank": rank, **hit}, ensure_ascii=False))
            continue
        if qi:
            print()
        print(f"query: {query}")
        for rank, hit in enumerate(hits, start=1):
            print(f"{rank:>4}  {hit['id']!s:>10}  {hit['score']:.4f}  {hit['text']}")


COMMAND = Command("search", "search an index from the command line", f"{__name__}:SearchOptions", run,
                  from_yaml=False)
