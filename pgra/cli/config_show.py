"""``pgra config show --config FILE``: a config with its ``base`` chain and overrides resolved."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import yaml

from ..core.config import from_dict, merge, option, parse_overrides, resolve_yaml
from ..core.errors import InputError, PgraError
from .command import Command


def _yaml_commands() -> list[str]:
    from . import COMMANDS

    return [name for name, cmd in COMMANDS.items() if cmd.from_yaml]


@dataclass
class ConfigShowOptions:
    action: str = option("show", positional=True, choices=("show",), help="show: print the resolved config")
    overrides: list[str] = option(default_factory=list, positional=True, metavar="KEY=VALUE",
                                  help="overrides applied on top, as on the command itself")
    config: str = option("", help="YAML config file (required)")
    command: str = option("", suggest=_yaml_commands,
                          help="the command the config is for (default: the one whose config accepts every key)")
    full: bool = option(True, help="fill in every default of the command's config")


def matching_commands(data: dict) -> list[str]:
    """The commands whose config dataclass accepts every key of ``data``."""
    from . import COMMANDS

    found = []
    for name in _yaml_commands():
        try:
            from_dict(COMMANDS[name].config_class(), data)
        except PgraError:
            continue
        found.append(name)
    return found


def run(opts: ConfigShowOptions) -> None:
    from . import COMMANDS

    if not opts.config:
        raise InputError("pass the config file with --config FILE", field="config")
    data = merge(resolve_yaml(opts.config), parse_overrides(opts.overrides))
    if opts.command and opts.command not in _yaml_commands():
        raise InputError(f"'{opts.command}' reads no config file; use one of {_yaml_commands()}", field="command")
    names = [opts.command] if opts.command else matching_commands(data)
    if len(names) == 1 and opts.full:
        cfg = from_dict(COMMANDS[names[0]].config_class(), data, source=opts.config)
        print(f"# {opts.config}, resolved for `pgra {names[0]}` (defaults filled in)")
        data = dataclasses.asdict(cfg)  # every field, those recorded only when set (to_dict) too
    elif not names:
        raise InputError("no command's config accepts all of these keys (pass --command to see which key fails)",
                         path=opts.config)
    else:
        print(f"# {opts.config}, resolved (keys of: {', '.join(names)}; pass --command for the defaults)")
    print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), end="")


COMMAND = Command("config", "print a config file resolved (base chain, overrides, defaults)",
                  f"{__name__}:ConfigShowOptions", run, from_yaml=False)
