"""Quiet library output unless ``-v``: silence what pgra expects, keep what it does not.

Silenced when not verbose (each is expected and explained by pgra where it matters):
- transformers' logging below ERROR: model load reports (MISSING/UNEXPECTED key tables, "This checkpoint
  seem corrupted" for tied weights), "new weights initialised" notes; pgra checks real missing weights
  itself (``pgra.reader.fid``) and says so in one line;
- accelerate's logging below ERROR ("Removed shared tensor ... while saving": tied encoder/decoder weights
  of bert2bert, restored on load);
- the Hugging Face libraries' own progress bars ("Loading weights" ...);
- the known, harmless FutureWarnings in ``EXPECTED_WARNINGS``.
pgra's own warnings (``warnings.warn`` from ``pgra.*``) always show.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

# (category, message regex) of warnings the libraries raise on code paths pgra uses as intended
EXPECTED_WARNINGS: tuple[tuple[type[Warning], str], ...] = (
    # EncoderDecoderModel computes the loss itself since 4.12 (the demo reader passes labels, as intended)
    (FutureWarning, r"Version v4\.12\.0 introduces a better way to train encoder-decoder models"),
    # torch's checkpoint API note when accelerate restores RNG state
    (FutureWarning, r"You are using `torch\.load` with `weights_only=False`"),
)
_QUIET_ENV = {
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "ACCELERATE_LOG_LEVEL": "error",
    "TOKENIZERS_PARALLELISM": "false",
}
_QUIET_LOGGERS = ("transformers", "accelerate", "huggingface_hub", "datasets", "DeepSpeed", "deepspeed",
                  "torch.distributed.elastic")


def configure_output(verbose: bool = False) -> None:
    """Quiet the libraries (``verbose=False``) or leave every message as the libraries emit it."""
    if verbose:
        return
    for key, value in _QUIET_ENV.items():  # read at import by libraries not imported yet
        os.environ.setdefault(key, value)
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    if "transformers" in sys.modules:  # already imported: set it directly too
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    for category, message in EXPECTED_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
