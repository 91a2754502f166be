"""Stage 1: task-agnostic first-stage retrievers (dense encoders + faiss, BM25) and their indexes."""
