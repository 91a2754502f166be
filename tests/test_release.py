"""Release hygiene and the documentation's pointers: LICENSE, CITATION.cff, py.typed, one version, every
documented path under the demo experiment made by `make demo`, every README section a file names."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import tomllib
import yaml

import pgra

ROOT = Path(__file__).resolve().parents[1]


def _doc_files() -> list[Path]:
    """The README, the docs pages and every source or config file that may quote them."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for folder, pattern in (("pgra", "*.py"), ("configs", "*.yaml"), ("bench", "*.py"), ("scripts", "*.py")):
        files += sorted((ROOT / folder).rglob(pattern))
    return files + [ROOT / "Makefile"]


def test_license_is_apache_and_matches_pyproject():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # an SPDX expression (PEP 639): setuptools deprecates the TOML table and warns at every install
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    assert requires == ["setuptools>=77"]  # the first setuptools that reads an SPDX license string


def test_version_is_declared_once():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in meta["project"] and "version" in meta["project"]["dynamic"]
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "pgra.__version__"}
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert str(cff["version"]) == pgra.__version__


def test_citation_cff_names_the_paper():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "Apache-2.0"
    for key in ("message", "title", "authors", "type"):
        assert cff[key], key
    paper = cff["preferred-citation"]
    assert paper["title"] == "Prompt-Guided Retrieval Augmentation for Non-Knowledge-Intensive Tasks"
    assert paper["year"] == 2023 and paper["authors"][0]["family-names"] == "Guo"
    assert "ACL 2023" in paper["collection-title"]


def test_citation_cff_cites_pgra_as_software_and_the_paper_as_its_reference():
    """Issue 71 item 3: the file's own entry is pgra, the software (its version, how it is obtained); pgra has no
    public URL, so it names none, and nowhere the paper authors' code as a repository; the paper is the preferred
    citation, found by its arXiv page."""
    text = (ROOT / "CITATION.cff").read_text()
    cff = yaml.safe_load(text)
    assert cff["type"] == "software" and cff["title"].startswith("pgra: ") and str(cff["version"]) == pgra.__version__
    assert {"url", "repository", "repository-code", "repository-artifact"} & set(cff) == set()
    assert "clone of its repository" in cff["message"] and "release archive" in cff["message"]
    assert "repository-code" not in text and "THUNLP-MT" not in text  # the paper authors' code is not pgra
    paper = cff["preferred-citation"]
    assert paper["type"] == "conference-paper" and paper["url"] == "https://arxiv.org/abs/2305.17653"


def test_make_dist_builds_the_release_archive_offline(tmp_path):
    """`make dist` in a copy of the checkout's sources (the checkout is not written to): pgra's sdist and wheel in
    dist/, built in this environment by setuptools' hooks (nothing downloaded), the wheel holding the package and
    its command, the sdist what builds it again."""
    import os
    import subprocess
    import sys
    import tarfile
    import zipfile

    import pytest

    venv = Path(sys.prefix)
    if not (venv / ".stamp-venv").is_file():
        pytest.skip("the suite's environment is not one `make setup` made")
    src = tmp_path / "src"
    for name in ("Makefile", "pyproject.toml", "README.md", "LICENSE"):
        (src / name).parent.mkdir(exist_ok=True)
        (src / name).write_bytes((ROOT / name).read_bytes())
    shutil.copytree(ROOT / "pgra", src / "pgra", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MAKEFLAGS")}
    done = subprocess.run(["make", "-C", str(src), "dist", f"VENV={venv}"], env={**env, "PIP_NO_INDEX": "1"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    v = pgra.__version__
    assert sorted(p.name for p in (src / "dist").iterdir()) == [f"pgra-{v}-py3-none-any.whl", f"pgra-{v}.tar.gz"]
    with zipfile.ZipFile(src / "dist" / f"pgra-{v}-py3-none-any.whl") as wheel:
        assert wheel.read("pgra/serving/export.py") == (ROOT / "pgra" / "serving" / "export.py").read_bytes()
        assert "pgra = pgra.cli:main" in wheel.read(f"pgra-{v}.dist-info/entry_points.txt").decode()
    with tarfile.open(src / "dist" / f"pgra-{v}.tar.gz") as sdist:
        names = set(sdist.getnames())
    assert {f"pgra-{v}/pyproject.toml", f"pgra-{v}/LICENSE", f"pgra-{v}/pgra/__init__.py"} <= names
    page = (ROOT / "docs" / "getting-pgra.md").read_text()  # the page that names the archive's files
    assert f"`pgra-{v}.tar.gz`, `pgra-{v}-py3-none-any.whl`" in page


def test_py_typed_ships_in_the_package():
    assert (ROOT / "pgra" / "py.typed").is_file()
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in meta["tool"]["setuptools"]["package-data"]["pgra"]


def test_changelog_has_an_unreleased_section():
    assert "## Unreleased" in (ROOT / "CHANGELOG.md").read_text()


def test_documented_demo_paths_are_made_by_make_demo():
    """Every ``runs/demo-experiment/<name>/`` a document or docstring names is a task of the demo's experiment
    (``make demo`` runs configs/demo/experiment.yaml) or its analysis folder."""
    cfg = yaml.safe_load((ROOT / "configs" / "demo" / "experiment.yaml").read_text())
    made = set(cfg["tasks"]) | {"analysis"}
    bad = []
    for path in _doc_files():
        for m in re.finditer(r"runs/demo-experiment/([\w.-]+)/", path.read_text(errors="replace")):
            if m.group(1) not in made:
                bad.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert not bad, bad


def test_documented_config_files_exist():
    """Every ``configs/...`` file the README or a docs page names exists."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    missing = []
    for path in docs:
        for m in re.finditer(r"configs/[\w./-]+\.(?:yaml|jsonl|json)", path.read_text()):
            if "<" not in m.group(0) and not (ROOT / m.group(0)).is_file():
                missing.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert not missing, missing


def _headings(paths: list[Path]) -> set[str]:
    out = set()
    for p in paths:
        for line in p.read_text().splitlines():
            if line.startswith("#") and not line.startswith("#!"):
                title = line.lstrip("#").strip()
                out.add(title.lower())
                out.add(title.split(" — ")[0].lower())   # bench headings: "<title> — `script`"
                out.add(title.split(":")[0].lower())     # "Analyses: the paper's questions, ..."
    return out


def test_quoted_readme_sections_exist():
    """A file that sends the reader to the README's (or a docs page's) "Some section" names a heading there: the
    README or a docs page for a README pointer (its sections moved to docs/), bench/README's for a bench/README
    pointer, the page itself for a docs/<page>.md pointer."""
    main = _headings([ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))])
    pattern = re.compile(r"(bench/README|README|docs/[\w-]+\.md)(?:\.md)?'?s?\s*[\"“*]([^\"”*\n]{3,60})[\"”*]")
    bad = []
    for path in _doc_files():
        for m in pattern.finditer(path.read_text(errors="replace")):
            where = m.group(1)
            heads = (main if where == "README" else _headings([ROOT / "bench" / "README.md"]) if where.startswith("bench")
                     else _headings([ROOT / where]) if (ROOT / where).is_file() else set())
            name = m.group(2).strip().lower()
            if name not in heads and f"the {name}" not in heads:
                bad.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert not bad, bad


def test_every_bench_script_has_a_make_target():
    """`make bench`, `make bench-scale` and `make bench-gpu` together run every benchmark script in bench/."""
    make = (ROOT / "Makefile").read_text()
    targets = re.findall(r"^(bench[\w-]*):.*\n((?:\t.*\n)+)", make, flags=re.M)
    run = {Path(m).name for _, body in targets for m in re.findall(r"bench/[\w]+\.py", body)}
    scripts = {p.name for p in (ROOT / "bench").glob("*.py")}
    assert {t for t, _ in targets} == {"bench", "bench-scale", "bench-gpu"}
    assert scripts - run == set(), sorted(scripts - run)


def test_readme_bibtex_matches_citation_cff():
    """The README's BibTeX names the paper and pgra's version as CITATION.cff does."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```bibtex\n", 1)[1].split("```", 1)[0]
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["preferred-citation"]["title"] in block
    assert f"version = {{{pgra.__version__}}}" in block
    for author in cff["preferred-citation"]["authors"]:
        assert f"{author['family-names']}, {author['given-names']}" in block
    assert block in (ROOT / "docs" / "citing.md").read_text()  # the site's copy of the README's section



def test_citation_cff_validates_with_cffconvert():
    """The schema check GitHub's "Cite this repository" relies on (cffconvert, in the `docs` extra)."""
    import pytest

    citation = pytest.importorskip("cffconvert.citation")
    citation.Citation((ROOT / "CITATION.cff").read_text()).validate()   # raises on a schema violation


def test_make_setup_can_choose_the_cpu_build_of_torch():
    """PyPI's Linux x86_64 torch is a CUDA build: TORCH_INDEX picks another index (docs/setup.md's table)."""
    import shutil
    import subprocess

    import pytest

    if shutil.which("make") is None:
        pytest.skip("make not installed")
    root = Path(__file__).resolve().parents[1]
    # (run by `make test TORCH_INDEX=...`, the outer make hands its variables on through MAKEFLAGS: not here)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "TORCH_INDEX")}

    def torch_line(*args: str) -> str:
        out = subprocess.run(["make", "-n", "-B", ".venv/.stamp-torch", *args], cwd=root, capture_output=True,
                             text=True, check=True, env=env).stdout
        return next(line for line in out.splitlines() if "install torch==" in line)

    assert "--index-url" not in torch_line()
    assert torch_line("TORCH_INDEX=https://download.pytorch.org/whl/cpu").endswith(
        "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu")
    assert "TORCH_INDEX=https://download.pytorch.org/whl/cpu" in (root / "docs" / "setup.md").read_text()
