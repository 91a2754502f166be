"""The texts pgra reads and passes on: the retrieval corpus, Hugging Face datasets, downloads, the JSONL
between stages, and the never-itself rule."""
