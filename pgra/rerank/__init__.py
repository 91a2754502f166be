"""Stage 2: the rerankers, one family each (``prompt_guided/``, the paper's, a folder of its own; ``cross_encoder``,
``query_likelihood``, ``mmr``, ``random``), and what they share: the interface and its registry (base.py), the
config (config.py), ``pgra rerank`` and a reranked folder read back (stage.py), the second stages (stages.py) and
the lookups over every stage family (families.py)."""
