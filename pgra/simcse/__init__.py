"""Unsupervised SimCSE (Gao et al. 2021): train a sentence encoder on the retrieval corpus itself."""
