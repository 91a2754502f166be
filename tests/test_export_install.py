"""Issue 71 item 3: an export carries what its receiver installs (the wheel of the pgra that made it; torch and
transformers pinned to the versions the run used), and its card's install lines work from the export folder alone:
in a fresh virtual environment without the checkout, offline."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from importlib.metadata import version
from pathlib import Path

import pytest

import pgra
from pgra.cli import main
from pgra.core.config import from_dict
from pgra.experiment import Experiment, ExperimentConfig
from pgra.serving.distribution import install_lines, pinned
from tests.test_experiment import _config
from tests.test_export import fake_run

ROOT = Path(__file__).resolve().parents[1]
TEXT = "A text to classify."


def _card_lines(card: str) -> list[list[str]]:
    """The commands of the card's shell block (its ``## Use`` section), each split as a shell would, comments out."""
    block = card.split("## Use\n", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [argv for argv in (shlex.split(line, comments=True) for line in block.splitlines()) if argv]


def _fresh_venv(where: Path) -> Path:
    """A new virtual environment that sees this one's packages (torch, transformers, ...: a folder of links to them
    and a .pth file, nothing downloaded) but not pgra; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    shared = where / "shared"
    shared.mkdir()
    for folder in {Path(sysconfig.get_path("purelib")), Path(sysconfig.get_path("platlib"))}:
        for entry in folder.iterdir():
            if entry.name != "pgra" and not entry.name.startswith(("pgra-", "pgra.", "__editable__")) \
                    and not (shared / entry.name).exists():
                (shared / entry.name).symlink_to(entry)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    (Path(site) / "shared.pth").write_text(f"{shared}\n")
    return python


@pytest.mark.integration
def test_the_cards_install_lines_install_and_predict_in_a_fresh_venv(tmp_path, corpus_txt, sky_task, tiny_opt,
                                                                      tiny_t5):
    """The export of a PGRA run, moved away from everything it came from; in a new virtual environment that has
    torch and transformers but no pgra, from a folder outside the checkout with PYTHONPATH unset: the card's lines
    (each `pip install` run offline: --no-index) install pgra from the folder's wheel, the versions they pin are the
    ones installed (and the run's), and its `pgra predict` labels the text as the run does."""
    from pgra.serving.pipeline import Pipeline

    lm = shutil.copytree(tiny_opt, tmp_path / "lm")
    grid = _config(tmp_path, corpus_txt, sky_task, lm, tiny_t5, methods=["pgra"], seeds=[1], report=False)
    assert Experiment(from_dict(ExperimentConfig, grid)).run() == []
    run = Path(grid["out"]) / "sky" / "pgra" / "seed-1"
    want = Pipeline.load(run).predict([TEXT])[0]["prediction"]
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "sky-pgra"), "--copy-index", "--copy-lm"]) == 0
    recorded = json.loads((run / "manifest.json").read_text())["versions"]
    for gone in (grid["out"], grid["index"]["out"], lm, tmp_path / "cache"):
        shutil.rmtree(gone)
    export = Path(shutil.move(str(tmp_path / "sky-pgra"), str(tmp_path / "receiver" / "sky-pgra")))

    started = time.monotonic()
    venv = tmp_path / "venv"
    python = _fresh_venv(venv)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", HF_HUB_OFFLINE="1", PIP_NO_INDEX="1")
    said = []
    for argv in _card_lines((export / "README.md").read_text()):
        assert argv[0] in ("pip", "pgra"), argv  # nothing else to run
        command = [str(python), "-m", "pip", *argv[1:]] if argv[0] == "pip" else [str(venv / "bin" / "pgra"), *argv[1:]]
        done = subprocess.run(command, cwd=export, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-3000:])
        said.append(done.stdout)
    assert said[-1].startswith(f"{want} ") and TEXT in said[-1]  # the card's `pgra predict` labels the text

    probe = ("import importlib.metadata as m, pgra; print(pgra.__file__); "
             "print(m.version('torch'), m.version('transformers'), m.version('pgra'))")
    done = subprocess.run([str(python), "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    where, versions = done.stdout.split("\n", 1)
    assert Path(where).resolve().is_relative_to(venv.resolve())  # installed from the wheel, not the checkout
    torch, transformers, installed = versions.split()
    card = (export / "README.md").read_text()
    assert f"pip install torch=={torch} " in card and f"pip install transformers=={transformers} " in card
    assert (torch, transformers, installed) == (recorded["torch"], recorded["transformers"], pgra.__version__)
    print(f"fresh venv: made, installed and predicted in {time.monotonic() - started:.1f} s")


@pytest.mark.parametrize(("break_it", "why"), [
    ("checkout", "this pgra does not run from a checkout"),
    ("BUILD", "setuptools could not build it from "),
])
def test_an_export_that_cannot_build_the_wheel_says_why_it_carries_none(tmp_path, capsys, monkeypatch, break_it,
                                                                         why):
    """pgra installed from a wheel (no checkout to build one from), or setuptools failing: the export is written,
    without wheel/; a `warning:` line and the card say why and how the receiver installs pgra instead."""
    import pgra.serving.distribution as distribution

    monkeypatch.setattr(distribution, "_BUILT", {})
    if break_it == "checkout":
        monkeypatch.setattr(distribution, "checkout", lambda: None)
    else:
        monkeypatch.setattr(distribution, "BUILD", "import sys; sys.exit('no setuptools here')")
    run = fake_run(tmp_path / "exp" / "sky" / "fid")
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert f"warning: the export carries no wheel of pgra: {why}" in err
    card = (tmp_path / "out" / "README.md").read_text()
    assert not (tmp_path / "out" / "wheel").exists()
    assert f"# no wheel of pgra in this folder: {why}" in card
    assert f"pgra {pgra.__version__} from a clone of its repository or its release archive" in card
    # fake_run's manifest records no versions: the card pins this machine's and says so
    assert f"torch=={version('torch')}" in card and "the version the run used" not in card
    assert card.count("this machine's version when exported (the run recorded none)") == 2


def test_the_card_pins_the_versions_the_run_recorded_and_says_whose_each_is():
    """The run's manifest's versions win over this machine's; one that is not a version (it would be run in a shell)
    or none recorded is this machine's, and the card says so instead of "the version the run used"."""
    assert pinned({"torch": "2.1.0+cu121", "transformers": "4.57.1"}) == {"torch": ("2.1.0+cu121", "run"),
                                                                         "transformers": ("4.57.1", "run")}
    here = {"torch": (version("torch"), "here"), "transformers": (version("transformers"), "here")}
    assert pinned({"torch": "1; rm -rf ~", "transformers": None}) == here
    assert pinned(None) == here  # a run without recorded versions
    lines = install_lines("pgra-0.1.0-py3-none-any.whl", {"torch": ("2.1.0", "here"), "transformers": ("4.57.1", "run")})
    assert lines[1:] == [
        "pip install torch==2.1.0   # this machine's version when exported (the run recorded none)",
        "pip install transformers==4.57.1   # the version the run used",
        'pip install "./wheel/pgra-0.1.0-py3-none-any.whl[cpu]"   # the pgra that made this export; [gpu] on a CUDA 12 '
        "machine"]


@pytest.mark.parametrize(("torch", "line"), [
    ("2.1.0+cu121", "pip install torch==2.1.0+cu121 --index-url https://download.pytorch.org/whl/cu121   # the "
                    "version the run used"),
    ("2.13.0+cpu", "pip install torch==2.13.0+cpu --index-url https://download.pytorch.org/whl/cpu   # the version "
                   "the run used"),
    ("2.4.1+rocm6.1", "pip install torch==2.4.1+rocm6.1 --index-url https://download.pytorch.org/whl/rocm6.1   # "
                      "the version the run used"),
    ("2.5.0a0+git1234", "pip install torch   # 2.5.0a0+git1234, the version the run used, cannot be pinned: a local "
                        "or pre-release build that no index serves"),
    ("2.6.0.dev20241112+cpu", "pip install torch   # 2.6.0.dev20241112+cpu, the version the run used, cannot be "
                              "pinned: a local or pre-release build that no index serves"),
    ("2.1.0+mybuild", "pip install torch   # 2.1.0+mybuild, the version the run used, cannot be pinned: a local or "
                      "pre-release build that no index serves"),
])
def test_the_cards_torch_line_is_one_pip_can_run(torch, line):
    """A known build tag puts PyTorch's index on the install line itself (not only in a comment); a local or
    pre-release build is on no index: the line installs torch unpinned and says which version the run had."""
    assert install_lines("pgra-0.1.0-py3-none-any.whl", {"torch": (torch, "run")})[1] == line
    assert install_lines(None, {"transformers": ("4.58.0.dev0", "run")}, "no checkout")[1].startswith(
        "pip install transformers   # 4.58.0.dev0, the version the run used, cannot be pinned")


def test_getting_pgras_example_is_what_the_card_writes():
    """docs/getting-pgra.md's example of a card's install lines is install_lines' output for a +cpu torch."""
    page = (ROOT / "docs" / "getting-pgra.md").read_text(encoding="utf-8")
    lines = install_lines("pgra-0.1.0-py3-none-any.whl", {"torch": ("2.13.0+cpu", "run"),
                                                           "transformers": ("5.25.0", "run")})
    assert "\n".join(lines) + '\npgra predict --run . --text "A text to classify."\n```' in page


def test_the_cards_predict_line_names_what_the_export_did_not_copy(tmp_path):
    """An export without copies: the card's `pgra predict` line says which options point at local copies."""
    from pgra.serving.card import _load_hint

    spec = {"index": {"copied": False, "encoder": str(tmp_path), "copied_encoder": False},
            "reranked": {"lm": str(tmp_path), "copied_lm": False}}
    assert _load_hint(spec, cli=True) == "  # elsewhere: --index PATH --encoder PATH --lm PATH (local copies)"
    assert _load_hint(spec) == '  # elsewhere: index="...", encoder="...", lm="..." (local copies)'


def test_the_wheel_ships_what_git_tracks_and_never_a_link(tmp_path):
    """In a git checkout the wheel's sources are the files git tracks (a file a user left in pgra/ stays out); a
    link is never followed (its target could be anything on this machine); without git, every plain file."""
    import subprocess

    from pgra.serving.distribution import _sources

    root = tmp_path / "checkout"
    (root / "pgra").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "pgra"\n')
    (root / "pgra" / "kept.py").write_text("x = 1\n")
    secret = tmp_path / "secret.py"
    secret.write_text("token = 'not yours'\n")
    (root / "pgra" / "linked.py").symlink_to(secret)
    names = {p.relative_to(root).as_posix() for p in _sources(root)}
    assert names == {"pyproject.toml", "pgra/kept.py"}  # no git: every plain file, no link
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "pyproject.toml", "pgra/kept.py"], check=True)
    (root / "pgra" / "left_here.py").write_text("draft = True\n")
    assert {p.relative_to(root).as_posix() for p in _sources(root)} == {"pyproject.toml", "pgra/kept.py"}
