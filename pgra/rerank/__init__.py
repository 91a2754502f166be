"""Stage 2: the rerankers, one family each (``prompt_guided/``, the paper's, a folder of its own; ``cross_encoder``,
``query_likelihood``, ``mmr``, ``random``), and what they share: the interface and its registry (base.py), the
config (config.py), a reranked folder read back (stage.py), and the second stages with ``pgra rerank``
(stages.py)."""
