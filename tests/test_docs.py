"""The documentation: every relative link and anchor in the README and docs/ resolves (checked here without
MkDocs, so also on GitHub, where the site's generated pages do not exist), the README keeps its first screen and
links every page, the site builds with `mkdocs --strict` (where the `docs` extra is installed), and the numbers
several pages could quote are kept in one place or checked against their source."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
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
            if not dest.is_file():  # the site's generated pages (cli.md, benchmarks.md) are no file here
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


# ---- numbers that more than one page could quote: one place each, or checked against their source ----------------

TEST_COUNT = re.compile(r"\b\d[\d,]{2,} (?:tests|passed)\b")


def test_only_the_readmes_make_test_line_counts_the_tests():
    """The suite's size (and its time on a fresh clone) is quoted once: the README's `make test` line. Every other
    page says "the suite" or points there, so two pages can never give two counts."""
    found = []
    for page in [*_pages(), ROOT / "bench" / "README.md"]:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            if TEST_COUNT.search(line):
                found.append((page.relative_to(ROOT).as_posix(), n, line))
    assert [(p, n) for p, n, _ in found] == [("README.md", 5)], found
    assert found[0][2].startswith("make test ")


def _bench_targets() -> dict[str, set[str]]:
    make = (ROOT / "Makefile").read_text()
    targets = re.findall(r"^(bench[\w-]*):.*\n((?:\t.*\n)+)", make, flags=re.M)
    return {name: {Path(s).stem for s in re.findall(r"bench/\w+\.(?:py|sh)", body)} for name, body in targets}


def test_bench_readme_lists_each_make_targets_scripts_and_is_the_one_place_for_their_time():
    """bench/README.md's first paragraph names, per target, exactly the scripts the Makefile runs; how long a bench
    target takes is said there only (not in the Makefile, the README or a docs page)."""
    intro = (ROOT / "bench" / "README.md").read_text().split("\n\n")[1]
    parts = re.split(r"`make (bench(?:-scale|-gpu)?)`", intro.split("The lists are")[0])
    listed = {name: set(re.findall(r"`(?!make )(\w+)(?:\.sh)?(?: [^`]*)?`", text))
              for name, text in zip(parts[1::2], parts[2::2], strict=True)}
    assert listed == _bench_targets()
    duration = re.compile(r"\b\d+(?:\.\d+)? ?(?:h|hours?|min)\b")
    for page in [ROOT / "Makefile", *_pages()]:
        for line in page.read_text().splitlines():
            comment = page.name == "Makefile" and line.startswith("#") and "bench" in line
            if comment or re.search(r"make bench|bench-scale|bench-gpu", line):
                assert not duration.search(line), f"{page.name}: {line}"


def test_which_index_at_which_size_is_one_table():
    """pgra does not pick an index type by corpus size (the default is flat at any size, as the pages say); the
    sizes at which to switch are in large-corpora.md's table only, which the README and stage 1 link."""
    from pgra.retrieval.dense_retriever import DenseConfig

    assert DenseConfig().index_type == "flat"
    size = re.compile(r"(?:from|up to|to|beyond) (?:about |~)?\d+M\b|a few million", re.I)
    for page in _pages():
        if page.name != "large-corpora.md":
            text = page.read_text()
            assert not size.search(text), f"{page.name}: {size.search(text).group(0)}"
    for page in (ROOT / "README.md", ROOT / "docs" / "stage1-retrieval.md"):
        assert "large-corpora.md#which-index-at-which-size" in page.read_text(), page.name
    assert "## Which index at which size" in (ROOT / "docs" / "large-corpora.md").read_text()


def _model_fields(node, key=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _model_fields(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from _model_fields(v, key)
    elif key in ("encoder", "lm", "model", "rerank_lms", "tokenizer") and isinstance(node, str):
        yield key, node


def test_the_offline_configs_name_only_local_models_and_the_docs_do_not_claim_more():
    """setup.md's *Where models come from*: the demo and laptop configs name local folders only (models/ from
    prepare-demo, runs/ the demo trains), while a hub id elsewhere is downloaded by transformers; no page claims
    that pgra never downloads."""
    for path in sorted([*(ROOT / "configs" / "demo").glob("*.yaml"), *(ROOT / "configs" / "laptop").glob("*.yaml")]):
        for key, value in _model_fields(yaml.safe_load(path.read_text())):
            assert value.startswith(("models/", "runs/")), f"{path.relative_to(ROOT)}: {key}: {value}"
    for page in _pages():
        assert not re.search(r"pgra (?:never downloads|downloads nothing)", page.read_text()), page.name
    assert "HF_HUB_OFFLINE=1" in (ROOT / "docs" / "setup.md").read_text()


@pytest.fixture(scope="module")
def table2_plans():

    module = load_script("bench/plan_table2.py")
    return [module.plan(8, cells_per_gpu=n) for n in (1, 2)]


GPU_HOURS = re.compile(r"(\d+(?:\.\d+)?)\s+GPU[ -]?h(?:ours)?\b")


def test_the_table2_gpu_hours_the_pages_quote_are_the_planners(table2_plans):
    """One planner prices Table 2 (bench/plan_table2.py, the functions `pgra experiment --dry-run` uses): every GPU-
    hour figure on the README and docs pages is its total, and in bench/README every other figure is labelled as
    what it is (bench_gpu_scale.py's tally, the earlier plan, issue 39's goal)."""
    totals = {f"{p['gpu_hours']:.1f}" for p in table2_plans}
    parts = totals | {f"{p['cell_gpu_s'] / 3600:.1f}" for p in table2_plans} | {
        f"{p['rerank_s'] * p['gpus'] / 3600:.1f}" for p in table2_plans}
    for page in _pages():  # a dry run's recorded output quoted whole (the analyses' own GPU hours) is no claim
        text = re.sub(r"<!-- (table2-[a-z-]*dry-run) -->.*?<!-- /\1 -->", "", page.read_text(), flags=re.S)
        for m in GPU_HOURS.finditer(text):
            assert m.group(1) in totals, f"{page.name}: {m.group(0)} is not the planner's {sorted(totals)}"
    bench = (ROOT / "bench" / "README.md").read_text()
    for m in GPU_HOURS.finditer(bench):
        before = bench[max(0, m.start() - 400):m.start()]
        assert m.group(1) in parts or re.search(r"tally|earlier plan|Issue 39's", before), m.group(0)
    total = re.search(r"\| \*\*total\*\* \| \*\*<!-- fig table2 field=total_s [^>]*-->([^<]*)<!-- /fig -->\*\* "
                      r"\(<!-- fig table2 field=gpu_hours [^>]*-->([^<]*)<!-- /fig -->\)", bench)
    assert total, "bench/README's Table 2 total row is not the planner's total_s and gpu_hours spans"
    assert total.groups() == (f"{table2_plans[0]['total_s'] / 3600:.2f} h", f"{table2_plans[0]['gpu_hours']:.1f} GPU h")


def test_the_experiments_page_shows_the_current_laptop_setting_and_the_changelog_its_history():
    """docs/experiments.md answers what a reader needs now (issue 71): the laptop experiment's current setting, its
    table (generated), what it shows and how to rerun it; the runs of superseded settings are in CHANGELOG.md, not
    beside the current ones; no status line says the table is partial when both tasks' seeds are committed."""
    text = (ROOT / "docs" / "experiments.md").read_text()
    laptop = text[text.index("### The laptop experiment"):text.index("### PGRA's mechanism at laptop scale")]
    assert "#### The table (k=150 into d=4, both tasks, 3 seeds)" in laptop and "**What it shows.**" in laptop
    assert "torchrun --nproc_per_node 2 scripts/experiment.py" in laptop and "<!-- laptop-table -->" in laptop
    for stale in ("superseded", "partial", "not yet", "(k=4 into d=2)", "bf16 readers"):
        assert stale not in laptop.replace("superseded settings*", ""), stale
    changelog = (ROOT / "CHANGELOG.md").read_text()
    history = changelog[changelog.index("## Laptop runs of superseded settings"):]
    assert "| pgra (k=150 reranked into d=4) | 76.5" in history and "| pgra | 70.3" in history
    # the roadmap names the committed pieces of the current settings' table (docs/results/laptop/<task>-seed<n>)
    roadmap = (ROOT / "docs" / "roadmap.md").read_text()
    committed = roadmap[roadmap.index("**Committed:**"):roadmap.index("**Open:**")]
    seeds: dict[str, list[int]] = {}
    for folder in (ROOT / "docs" / "results" / "laptop").glob("*-seed*"):
        piece = re.fullmatch(r"(.+)-seed(\d+)(?:-[a-z0-9]+)?", folder.name)
        assert piece, folder.name
        if int(piece[2]) not in seeds.setdefault(piece[1], []):
            seeds[piece[1]].append(int(piece[2]))
    for task, found in seeds.items():
        name = "MR" if task == "mr" else task
        said = f"{name} seed {found[0]}" if len(found) == 1 else f"{name} seeds {min(found)}-{max(found)}"
        assert said in committed and sorted(found) == list(range(min(found), max(found) + 1)), said


# ---- claims that drift as the code grows (issue 71) ------------------------------------------------------------

EXTRA = re.compile(r"(?<![/\w.-])pgra\[[\w,\-]+\]")  # a local path (PATH/TO/pgra[cpu], a clone) is no index


def test_no_install_line_names_an_extra_of_a_pgra_that_is_not_on_an_index():
    """pgra is installed from its repository (`pip install -e '.[cpu,...]'` in a clone), not from PyPI: a page or an
    error message that says `pip install 'pgra[slurm]'` sends the reader to a package that does not exist."""
    files = [*_pages(), ROOT / "bench" / "README.md", ROOT / "Makefile", *sorted((ROOT / "pgra").rglob("*.py")),
             *sorted(p for p in (ROOT / "examples").rglob("*") if p.is_file() and p.suffix in (".md", ".yaml", ".sbatch"))]
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in files for m in EXTRA.finditer(p.read_text())]
    assert found == []


def test_the_architecture_map_names_every_module_script_and_example():
    """The README calls docs/architecture.md the map of every package and module: each module of pgra/ (by its
    name), each script of scripts/ and each folder of examples/ is named in the map's block."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("```")[1]
    missing = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "pgra").rglob("*.py"))
               if not re.search(rf"\b{re.escape(p.parent.name if p.stem == '__init__' else p.stem)}\b", block)]
    missing += [f"scripts/{p.name}" for p in sorted((ROOT / "scripts").glob("*.py")) if p.name not in block]
    missing += [f"examples/{p.name}" for p in sorted((ROOT / "examples").iterdir()) if f"{p.name}/" not in block]
    assert missing == []
    assert "every package and module" in (ROOT / "README.md").read_text()


def test_the_readme_names_the_pages_that_are_not_plain_markdown():
    """The README says the docs are plain markdown, readable on GitHub; a page that holds mkdocstrings directives
    (`::: pgra.x`, which only the site build renders) is named there as the exception."""
    readme = (ROOT / "README.md").read_text()
    directives = [p.name for p in sorted((ROOT / "docs").glob("*.md"))
                  if re.search(r"^::: ", p.read_text(), flags=re.M)]
    assert directives == ["api.md"]
    sentence = readme[readme.index("readable here"):][:300]
    for name in directives:
        assert f"docs/{name}" in sentence, name


def test_the_readmes_first_screen_says_what_the_first_hour_needs_each_in_one_line():
    """Before the first `make`: the platforms and Python versions (pyproject's floor), the disk, the CUDA torch PyPI
    gives Linux x86_64 and the TORCH_INDEX that avoids it (the Makefile's), and what `make test` installs outside
    the virtual environment (Chromium with apt, as the Makefile's `browser` target does as root), and where pgra
    comes from (a clone, or the release archive `make dist` builds): one line each."""
    readme = (ROOT / "README.md").read_text()
    screen = readme[:readme.index("pgra reproduces")]
    bullets = {m[1]: m[2] for m in re.finditer(r"^- \*\*`?([\w ]+?)`?\*\*:?(.*)$", screen, flags=re.M)}
    assert set(bullets) == {"Platforms", "Disk", "torch", "Where pgra comes from", "make test"}
    assert all(not line.startswith("  ") for line in screen.splitlines())  # no bullet runs on to a second line
    floor = re.search(r'requires-python = ">=([\d.]+)"', (ROOT / "pyproject.toml").read_text())[1]
    assert "Linux x86_64" in bullets["Platforms"] and f"{floor} or newer" in bullets["Platforms"]
    assert "GB" in bullets["Disk"]
    make = (ROOT / "Makefile").read_text()
    index = re.search(r"make setup (TORCH_INDEX=\S+)", make)[1]
    assert "CUDA" in bullets["torch"] and f"make setup {index}" in bullets["torch"]
    assert "apt-get install" in make and '"$$(id -u)" != 0' in make
    assert "Chromium" in bullets["make test"] and "root" in bullets["make test"] and "apt" in bullets["make test"]
    assert "docs/getting-pgra.md" in bullets["Where pgra comes from"] and "make dist" in bullets["Where pgra comes from"]
