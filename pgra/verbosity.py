"""Quiet library output unless ``-v`` (interim version; the output issue replaces it)."""

from __future__ import annotations


def configure_output(verbose: bool) -> None:
    """Silence transformers' expected load reports unless ``verbose``."""
    if verbose:
        return
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
