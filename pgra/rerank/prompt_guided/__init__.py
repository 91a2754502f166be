"""The paper's reranker (Eq. 3), one family of ``pgra.rerank`` like the others: the registered class
(reranker.py), its stage (rerank_stage.py: the demonstrations' selection, the persistent embedding caches,
the processes), the in-memory reranker ``Pipeline`` replays (in_memory.py), its LM embedder (embedder.py,
prefix_attention.py), caches (cache.py), corpus pass (corpus_pass.py), full search (full_search.py), Eq. 3
(scoring.py) and cost model (cost_model.py). The shared modules of ``pgra.rerank`` reach it through the
reranker registry (``BUILTIN``), not by import."""

from . import reranker, search_stage  # noqa: E402,F401  (the reranker and its own stage register where they live)
