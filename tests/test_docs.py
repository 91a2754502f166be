"""The documentation: every relative link and anchor in the README and docs/ resolves (checked here without
MkDocs), the README keeps its first screen and links every page, and the site builds with `mkdocs --strict`
(where the `docs` extra is installed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GENERATED = {"cli.md", "benchmarks.md", "indexes.md"}  # pages scripts/docs_hooks.py adds to the site
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _slug(title: str) -> str:
    """GitHub's (and MkDocs' toc) anchor of a heading: lower case, punctuation dropped, spaces as dashes."""
    title = re.sub(r"`", "", title.strip().lower())
    return re.sub(r"[^\w\- ]", "", title).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    out, fence = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            out.add(_slug(line.lstrip("#")))
    return out


def _links(path: Path) -> list[str]:
    text, out, fence = path.read_text(), [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence:
            out += [a or b for a, b in LINK.findall(line)]
    return out


def test_every_relative_link_and_anchor_resolves():
    bad = []
    for page in _pages():
        for link in _links(page):
            if re.match(r"[a-z]+:", link):
                continue  # http(s), mailto
            target, _, anchor = link.partition("#")
            dest = (page.parent / target).resolve() if target else page
            if page.parent.name == "docs" and target in GENERATED:
                continue
            if not dest.exists():
                bad.append(f"{page.relative_to(ROOT)}: {link} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                bad.append(f"{page.relative_to(ROOT)}: {link} (no such heading)")
    assert not bad, bad


def test_readme_keeps_its_first_screen_and_links_every_page():
    readme = (ROOT / "README.md").read_text()
    assert readme.startswith("# pgra") and "make demo" in readme[:400] and "make test" in readme[:400]
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text().split("\nhooks:")[0] + "\n")  # before the python tags
    assert nav["docs_dir"] == "docs" and nav["strict"] is True
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name not in ("index.md", "api.md", "citing.md"):
            assert f"](docs/{page.name})" in readme, f"the README does not link docs/{page.name}"
    assert "](docs/architecture.md)" in readme  # the repository's map


def test_the_site_builds_strict(tmp_path):
    """`make docs`: mkdocs build --strict (every link and anchor, the generated command reference, the API
    reference from the docstrings)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings_handlers.python")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    cli = (tmp_path / "site" / "cli" / "index.html").read_text()
    assert "pgra export" in cli and "--compare" in cli
    assert "Pipeline" in (tmp_path / "site" / "api" / "index.html").read_text()
