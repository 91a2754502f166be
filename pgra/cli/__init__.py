"""``pgra``: one subcommand per stage (``pgra -h``; ``pgra COMMAND -h`` for its flags).

One module per command, each declaring a :class:`Command` (name, help, config dataclass, run function).
Flags are generated from the config dataclass (see :mod:`pgra.cli.options`); only the chosen command's
module and config are imported, so ``pgra -h`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ..core.errors import PgraError, os_error_message, os_error_of
from ..core.faults import parse_fault
from ..storage.lock import is_main_launch, output_lock
from .command import Command

_MODULES = ("prepare_demo", "download_data", "build_index", "search", "retrieve", "rerank", "peek", "train",
            "train_simcse", "eval_encoder", "icl", "experiment", "analyze", "report", "bundle", "evaluate", "predict", "tasks", "config_show",
            "fid", "export")
COMMANDS: dict[str, Command] = {}
for _name in _MODULES:
    _cmd: Command = importlib.import_module(f"{__name__}.{_name}").COMMAND
    COMMANDS[_cmd.name] = _cmd


def top_parser() -> argparse.ArgumentParser:
    """``pgra [-v] COMMAND ...``: the list of commands; each command parses its own flags."""
    from .. import __version__

    listing = "\n".join(f"  {name:<14} {cmd.help}" for name, cmd in COMMANDS.items())
    p = argparse.ArgumentParser(prog="pgra", description="Prompt-Guided Retrieval Augmentation (PGRA) pipeline",
                                epilog=f"commands:\n{listing}\n\n`pgra COMMAND -h` lists a command's flags.",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="show the libraries' load reports and warnings")
    p.add_argument("--version", action="version", version=f"pgra {__version__}")
    p.add_argument("command", choices=list(COMMANDS), metavar="COMMAND")
    return p


def build_parser(name: str) -> argparse.ArgumentParser:
    """The parser of one command (generated from its config dataclass)."""
    return COMMANDS[name].parser()[0]


def main(argv: list[str] | None = None) -> int:
    """Run ``pgra`` with ``argv``; returns the exit code (2 for bad input, with one ``error:`` line)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    at = next((i for i, a in enumerate(argv) if not a.startswith("-")), len(argv))
    top = top_parser().parse_args(argv[: at + 1])
    command = COMMANDS[top.command]
    try:
        ns = command.parse(argv[at + 1:])  # its flags come from the registries: a plug-in there may be refused
    except PgraError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from ..core.verbosity import configure_output

    configure_output(verbose=top.verbose or ns.verbose)
    out = ""
    try:
        parse_fault()  # a malformed PGRA_FAULT is refused before anything runs
        cfg = command.build_config(ns)
        out = getattr(cfg, command.writes, "") if command.writes else ""
        if out and command.locks and is_main_launch():
            with output_lock(out, f"pgra {command.name}", field=command.writes):
                code = command.run(cfg)
        else:
            code = command.run(cfg)
    except PgraError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a full disk, a permission, a read-only folder: one line naming the path, no traceback
        error = os_error_of(e)  # an OSError, or one a library wrapped (safetensors' save on a full disk)
        if error is None:
            raise
        print(f"error: {os_error_message(error, out or None)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; finished work is kept and a re-run resumes", file=sys.stderr)
        return 130
    return int(code or 0)


__all__ = ["COMMANDS", "Command", "build_parser", "main", "top_parser"]
