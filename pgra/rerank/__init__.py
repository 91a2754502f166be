"""Stage 2: the prompt-guided reranker (prompt assembly, LM embedder, reranking)."""
