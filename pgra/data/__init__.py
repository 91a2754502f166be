"""The texts pgra reads and passes on: corpus, HF datasets, downloads, the stage JSONL, the never-itself rule."""
