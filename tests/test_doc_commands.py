"""Every `pgra` command the README, docs/ and bench/README.md show in a shell block parses with pgra's own command line: the
subcommand exists, every flag exists and takes its value, and every `key=value` override and `--config` file builds
the command's config (a real field, a value it accepts). Nothing runs: the demo's artifacts the commands read are
not in the suite, so input paths are not checked (``check_config`` is not called).

Read: ```bash / ```sh / ```shell / ```console blocks, backslash continuations joined, comments dropped, `&&` and `;`
separating commands; `pgra ...`, `.venv/bin/pgra ...`, `python -m pgra.cli ...` and `scripts/NAME.py ...` (after
`python`, `torchrun ...` or `accelerate launch ...`: the script's `main(["COMMAND", ...])`). Also the inline code
spans of the prose that are a whole command (`pgra config show`), except synopses (`[--flag]`, `a|b`, `...`)."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from pgra.cli import COMMANDS, top_parser
from pgra.cli.options import config_from_args
from pgra.core.errors import PgraError

ROOT = Path(__file__).resolve().parents[1]
SHELL = {"bash", "sh", "shell", "console"}
SCRIPT = re.compile(r"(?:^|/)scripts/(\w+)\.py$")
SEPARATORS = {"&&", "||", ";", "|"}


def script_commands() -> dict[str, str]:
    """scripts/NAME.py -> the pgra command it runs (its ``main(["COMMAND", *sys.argv[1:]])``)."""
    out = {}
    for path in sorted((ROOT / "scripts").glob("*.py")):
        found = re.search(r"""main\(\[\s*["']([\w-]+)["']""", path.read_text())
        if found:
            out[path.stem] = found.group(1)
    return out


def shell_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, logical line) of every shell block in a markdown text, continuations joined."""
    out: list[tuple[int, str]] = []
    fence, pending, start = None, "", 0
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
            pending = ""
            continue
        if fence not in SHELL:
            continue
        if not pending:
            start = number
        stripped = line.rstrip()
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    return out


INLINE = re.compile(r"`((?:\.venv/bin/)?pgra [a-z][^`]*)`")
SYNOPSIS = ("[", "|", "...", "\u2026", "<")


def inline_commands(text: str) -> list[tuple[int, str]]:
    """(line number, command) of every inline code span outside code blocks that is a whole pgra command."""
    prose = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
    return [(prose.count("\n", 0, m.start()) + 1, m.group(1).replace("\n", " ")) for m in INLINE.finditer(prose)
            if not any(mark in m.group(1) for mark in SYNOPSIS)]


def pgra_invocations(line: str, scripts: dict[str, str]) -> list[list[str]]:
    """The argv (after `pgra`) of each pgra command on one logical shell line."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)  # `a; b` splits at the `;`, `# ...` is dropped
    lexer.whitespace_split = True
    tokens = list(lexer)
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token in SEPARATORS:
            segments.append([])
        else:
            segments[-1].append(token)
    found = []
    for seg in segments:
        for i, token in enumerate(seg):
            if i == 0 and (token == "pgra" or token.endswith("/bin/pgra")):
                found.append(seg[1:])
                break
            if token == "-m" and seg[i + 1: i + 2] == ["pgra.cli"]:
                found.append(seg[i + 2:])
                break
            script = SCRIPT.search(token)
            if script:
                assert script.group(1) in scripts, f"{token}: no such pgra script in scripts/"
                found.append([scripts[script.group(1)], *seg[i + 1:]])
                break
    return found


def check_argv(argv: list[str]) -> str | None:
    """None when ``pgra ARGV`` parses and builds its config (paths unchecked); else what is wrong."""
    at = next((i for i, a in enumerate(argv) if not a.startswith("-")), len(argv))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            top = top_parser().parse_args(argv[: at + 1])
            command = COMMANDS[top.command]
            ns: argparse.Namespace = command.parse(argv[at + 1:])
    except SystemExit:
        lines = err.getvalue().strip().splitlines()
        return lines[-1] if lines else "argparse refused it"
    try:
        config_from_args(command.config_class(), ns, ns.generated_options, command.from_yaml)
    except PgraError as e:
        return f"error: {e}"
    return None


def broken_commands(pages: list[Path]) -> list[str]:
    """'page:line: pgra ARGV -> what is wrong' for every documented pgra command that does not parse."""
    scripts, bad = script_commands(), []
    for page in pages:
        text = page.read_text()
        for number, line in shell_lines(text) + inline_commands(text):
            for argv in pgra_invocations(line, scripts):
                problem = check_argv(argv)
                if problem:
                    name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name
                    bad.append(f"{name}:{number}: pgra {shlex.join(argv)} -> {problem}")
    return bad


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]


def test_every_documented_command_parses(monkeypatch):
    monkeypatch.chdir(ROOT)  # --config paths are the repository's
    scripts = script_commands()
    seen = [argv for page in _pages() for _, line in shell_lines(page.read_text())
            for argv in pgra_invocations(line, scripts)]
    assert len(seen) >= 40 and {a[0] for a in seen} >= {"build-index", "retrieve", "rerank", "train", "experiment"}
    assert not broken_commands(_pages()), "\n".join(broken_commands(_pages()))


PLANTED = """\
```bash
pgra search --index indexes/demo-bm25 -k 5 --query "a \\\\ b" --json   # fine
pgra retrieve --config configs/demo/retrieve_wiki_topic.yaml \\
    --no-such-flag 3                                           # a flag that does not exist
pgra rerank --config configs/demo/rerank_smollm2.yaml top_dd=4 # an override naming no field
pgra reranks --out x                                           # no such command
pgra tasks && .venv/bin/pgra train --config configs/nowhere.yaml
torchrun --nproc_per_node 2 scripts/train.py --config configs/demo/reader_bert2bert.yaml --epochz 2
```

```python
pgra.nothing --checked here
```

In prose `pgra peek runs/x --nn 2` is checked, `pgra evaluate --run RUN [--split S]` (a synopsis) is not.
"""


def test_a_planted_bad_command_is_found(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    page = tmp_path / "planted.md"
    page.write_text(PLANTED)
    bad = broken_commands([page])
    assert [b.split(":")[1] for b in bad] == ["3", "5", "6", "7", "8", "15"], bad
    assert "--no-such-flag" in bad[0] and "top_dd" in bad[1] and "reranks" in bad[2]
    assert "configs/nowhere.yaml" in bad[3] and "--epochz" in bad[4] and "--nn" in bad[5]


@pytest.mark.parametrize("line, argv", [
    ("pgra tasks show sst2   # labels", [["tasks", "show", "sst2"]]),
    ("python -m pgra.cli peek runs/x -n 2; echo done", [["peek", "runs/x", "-n", "2"]]),
    ("accelerate launch --num_processes 8 scripts/train.py --config c.yaml", [["train", "--config", "c.yaml"]]),
    ("make demo   # then pgra report", []),
])
def test_invocations_are_read_from_a_shell_line(line, argv):
    assert pgra_invocations(line, script_commands()) == argv
