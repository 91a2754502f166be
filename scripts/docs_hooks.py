"""MkDocs hooks (mkdocs.yml ``hooks:``): the generated pages and the repository files the docs link to.

- ``cli.md``: every command's ``-h`` text, generated from the same option declarations as the CLI itself;
- ``benchmarks.md`` and ``indexes.md``: ``bench/README.md`` and ``indexes/README.md`` as pages (with the
  benchmark figure), so the docs' links to them (``../bench/README.md``, readable on GitHub) resolve on the site;
- any other repository file a page links to as ``../<path>`` (an example config) is copied into the site;
- optional pages other work adds (``rerankers.md``, ``selectors.md``, ``large-corpora.md``) join the nav when present.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
AS_PAGES = {"bench/README.md": "benchmarks.md", "indexes/README.md": "indexes.md"}
OPTIONAL = {"rerankers.md": ("Stages", "Rerankers"), "selectors.md": ("Stages", "Demonstration selectors"),
            "large-corpora.md": ("Experiments", "Large corpora")}
_REPO_LINK = re.compile(r"\]\(\.\./([^)#\s]+)(#[^)\s]*)?\)")


def on_config(config):
    """Add the optional pages that exist to their nav section."""
    docs = Path(config["docs_dir"])
    for page, (section, title) in OPTIONAL.items():
        if not (docs / page).is_file():
            continue
        for entry in config["nav"]:
            if isinstance(entry, dict) and section in entry:
                entry[section].append({title: page})
    return config


def command_reference() -> str:
    """Every command's help, as `pgra COMMAND -h` prints it."""
    os.environ["COLUMNS"] = "110"  # argparse's line width
    from pgra.cli import COMMANDS, build_parser, top_parser

    parts = ["# Command reference", "",
             "Generated from the commands' option declarations (`option(...)` in the config dataclasses), the same "
             "source as `pgra COMMAND -h`. Every option is also a YAML key (`--config FILE`) and a `key=value` "
             "override where the command reads a config file.", "",
             "```text", top_parser().format_help().rstrip(), "```", ""]
    for name in COMMANDS:
        parts += [f"## pgra {name}", "", "```text", build_parser(name).format_help().rstrip(), "```", ""]
    return "\n".join(parts)


def on_files(files, config):
    files.append(File.generated(config, "cli.md", content=command_reference()))
    for src, page in AS_PAGES.items():
        files.append(File.generated(config, page, abs_src_path=str(ROOT / src)))
    files.append(File.generated(config, "results/scaling.png", abs_src_path=str(ROOT / "bench/results/scaling.png")))
    linked = set()
    for md in Path(config["docs_dir"]).glob("*.md"):
        for m in _REPO_LINK.finditer(md.read_text(encoding="utf-8")):
            if m.group(1) not in AS_PAGES and (ROOT / m.group(1)).is_file():
                linked.add(m.group(1))
    for path in sorted(linked):
        files.append(File.generated(config, path, abs_src_path=str(ROOT / path)))
    return files


def on_page_markdown(markdown, page, config, files):
    """``../bench/README.md`` -> ``benchmarks.md``; ``../<file>`` -> the site's copy of it."""
    def target(m: re.Match) -> str:
        path, anchor = m.group(1), m.group(2) or ""
        return f"]({AS_PAGES.get(path, path)}{anchor})"

    return _REPO_LINK.sub(target, markdown)
