"""A command: a name, a one-line help, its config dataclass and the function that runs it."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .options import Leaf, add_config_arguments, config_from_args


@dataclass(frozen=True)
class Command:
    """One ``pgra`` subcommand. ``config`` is ``"module:Class"``, imported only when the command runs."""

    name: str
    help: str
    config: str  # "module:Class", or "module:function" that makes the class
    run: Callable[[Any], int | None]  # the exit code (None: 0)
    from_yaml: bool = True  # --config FILE and key=value overrides
    description: str = ""
    writes: str = ""  # the config field naming the output folder this command writes (locked while it runs)
    locks: bool = True  # False: jobs share the folder ``writes`` names, claiming its parts (``pgra experiment``)

    def config_class(self) -> type:
        """The config dataclass ``config`` names: a class, or a function that makes it from the parts registered now
        (``pgra.rerank.config:rerank_config``: a plug-in's options included)."""
        module, _, name = self.config.partition(":")
        made = getattr(importlib.import_module(module), name)
        return made if isinstance(made, type) else made()

    def parser(self) -> tuple[argparse.ArgumentParser, list[Leaf]]:
        """This command's parser, generated from its config dataclass."""
        p = argparse.ArgumentParser(prog=f"pgra {self.name}", description=self.description or self.help,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("-v", "--verbose", action="store_true",
                       help="show everything, including the libraries' load reports and warnings")
        added = add_config_arguments(p, self.config_class(), self.from_yaml)
        return p, added

    def parse(self, argv: list[str]) -> argparse.Namespace:
        """Parse ``argv`` (argparse prints usage errors and exits 2)."""
        parser, added = self.parser()
        ns = parser.parse_intermixed_args(argv)  # key=value may follow flags
        ns.generated_options = added
        return ns

    def build_config(self, ns: argparse.Namespace) -> Any:
        """The config from ``--config``, ``key=value`` and flags (an InputError names a bad key or value)."""
        from ..core.config import check_config

        cfg = config_from_args(self.config_class(), ns, ns.generated_options, self.from_yaml)
        check_config(cfg)  # ranges were checked while building; this adds the paths that must exist
        return cfg


def read_texts(values: list[str], file: str, what: str, flag: str, file_flag: str) -> list[str]:
    """Texts given with a repeatable flag (none empty) plus the non-blank lines of a UTF-8 file; at least one
    (else an InputError naming the flag or the file)."""
    from ..core.errors import InputError
    from ..storage.artifacts import read_utf8

    texts = list(values)
    blank = next((i for i, t in enumerate(texts, start=1) if not t.strip()), None)
    if blank is not None:  # an empty query would search (and an empty input read) nothing at all
        raise InputError(f"{what} {blank} is empty or only whitespace", field=flag.lstrip("-"))
    if file:
        text = read_utf8(file, f"{what} file", field=file_flag.lstrip("-").replace("-", "_"))
        texts += [t for t in text.splitlines() if t.strip()]
    if not texts:
        raise InputError(f"no {what}: pass {flag} TEXT (repeatable) or {file_flag} FILE", field=flag.lstrip("-"))
    return texts


def run_distributed(fn: Callable[..., Any], cfg: Any) -> tuple[Any, Any]:
    """Run a stage under torchrun/accelerate's process group (or alone); returns (context, result)."""
    from ..runtime.distributed import init_distributed, shutdown_distributed

    ctx = init_distributed()
    try:
        result = fn(cfg, ctx)
        ctx.barrier()  # every rank is done with its collectives before any tears the group down (a 2-node
        return ctx, result  # rerank once aborted at exit: "terminate called without an active exception")
    finally:
        shutdown_distributed()
