"""pgra: Prompt-Guided Retrieval Augmentation for non-knowledge-intensive text classification."""

__version__ = "0.1.0"
