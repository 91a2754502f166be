"""Quiet library output unless ``-v``: silence what pgra expects (library logging below ERROR, HF progress
bars, ``EXPECTED_WARNINGS``), keep what it does not; child processes inherit it (``PGRA_QUIET``)."""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

# (category, message regex, the module that raises it, an example message) of warnings the libraries raise on
# code paths pgra uses as intended
EXPECTED_WARNINGS: tuple[tuple[type[Warning], str, str, str], ...] = (
    # EncoderDecoderModel.forward with labels: the demo reader (bert2bert) is trained exactly this way
    (FutureWarning, r"Version v4\.12\.0 introduces a better way to train encoder-decoder models",
     "transformers.models.encoder_decoder.modeling_encoder_decoder",
     "Version v4.12.0 introduces a better way to train encoder-decoder models by computing the loss inside the "
     "encoder-decoder framework rather than in the decoder itself."),
)
QUIET_MARK = "PGRA_QUIET"  # set by a quiet process: its pgra child processes (cells, workers) quiet themselves too
_QUIET_ENV = {  # read at import time by libraries not imported yet (and by child processes)
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "ACCELERATE_LOG_LEVEL": "error",
    QUIET_MARK: "1",
}
_QUIET_LOGGERS = ("transformers", "accelerate", "huggingface_hub", "DeepSpeed", "torch.distributed.elastic")
_verbose = False  # what the command asked for (``pgra -v``), read by the Python API it calls: :func:`verbose_output`


class _ErrorsOnly(logging.Filter):
    """Let only ERROR and above through."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


def configure_child_output() -> None:
    """In a pgra child process: quiet as its parent was (:data:`QUIET_MARK`; warning filters are not inherited)."""
    if os.environ.get(QUIET_MARK) == "1":
        configure_output(False)


def configure_output(verbose: bool) -> None:
    """Quiet the libraries' expected output unless ``verbose``; idempotent, before or after they are imported."""
    global _verbose
    _verbose = verbose
    if verbose:
        os.environ.pop(QUIET_MARK, None)  # a verbose command's cells show everything too, whatever started it
        return
    _quiet()


def _quiet() -> None:
    """Silence what :func:`configure_output` silences (globally)."""
    for key, value in _QUIET_ENV.items():
        os.environ.setdefault(key, value)
    for name in _QUIET_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.ERROR)
        # a library that sets its logger's level when imported (DeepSpeed does) keeps this filter
        if not any(isinstance(f, _ErrorsOnly) for f in logger.filters):
            logger.addFilter(_ErrorsOnly())
    if "transformers" in sys.modules:  # imported already: its env vars were read, set it directly
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    for category, message, module, _ in EXPECTED_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=re.escape(module) + "$")


def verbose_output() -> bool:
    """Whether the command asked to show everything (:func:`configure_output` with ``verbose=True``: ``pgra -v``)."""
    return _verbose


@contextmanager
def quiet_output(verbose: bool = False) -> Iterator[None]:
    """:func:`configure_output` for the ``with`` block only: every setting it changes is restored at its end."""
    if verbose:
        yield
        return
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()  # (sets its logger up from the user's environment, if not yet)
    loggers = [(logger, logger.level, list(logger.filters)) for logger in map(logging.getLogger, _QUIET_LOGGERS)]
    env = {key: os.environ.get(key) for key in _QUIET_ENV}
    bars, hub_bars_off = hf_logging.is_progress_bar_enabled(), are_progress_bars_disabled()
    try:
        with warnings.catch_warnings():  # the warning filters come back on leaving it
            _quiet()
            yield
    finally:
        for logger, level, filters in loggers:
            logger.setLevel(level)
            logger.filters[:] = filters
        hf_logging.set_verbosity(verbosity)
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        with warnings.catch_warnings():  # the Hub warns when its environment variable outranks a call: it may
            warnings.simplefilter("ignore")  # (HF_HUB_DISABLE_PROGRESS_BARS set by the user or by the CLI earlier)
            (hf_logging.enable_progress_bar if bars else hf_logging.disable_progress_bar)()  # sets the Hub's too
            (disable_progress_bars if hub_bars_off else enable_progress_bars)()
