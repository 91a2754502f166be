"""The tutorials' commands, run in the order the pages give them, at tiny scale.

Each page's ```bash blocks are read line by line (a trailing backslash continues a line; comments and blank lines
are dropped) and every command must match exactly one rule of the page: run (after the page's stated
substitutions, which make it small) or skip (a set-up step the suite has already done, or one that needs the
network or a cluster, with the reason). A command no rule covers fails the test, so a page cannot gain a command
the suite does not run or account for.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.conftest import demo_asset

ROOT = Path(__file__).resolve().parents[1]
CLI = "import sys; from pgra.cli import main; sys.exit(main(sys.argv[1:]))"


def page_commands(page: Path) -> list[str]:
    """The commands of ``page``'s ```bash blocks, in order (continuations joined, comments dropped)."""
    commands: list[str] = []
    inside, pending = False, ""
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```bash" if not inside else False
            continue
        if not inside:
            continue
        text = pending + line.strip()
        if text.endswith("\\"):
            pending = text[:-1].rstrip() + " "
            continue
        pending = ""
        text = re.sub(r"\s+#.*$", "", text) if not text.startswith("#") else ""
        if text:
            commands.append(text)
    return commands


Rule = tuple[str, Callable[[str], "list[str] | str | None"]]


def run_page(page: Path, rules: list[Rule], cwd: Path, env: dict[str, str], timeout: int = 900) -> list[str]:
    """Run ``page``'s commands under ``rules`` (pattern, action: argv to run, a skip reason, or None to refuse) in
    ``cwd``; returns what each printed. A command no rule matches, or more than one, fails the test."""
    outputs = []
    for command in page_commands(page):
        matching = [action for pattern, action in rules if re.fullmatch(pattern, command)]
        assert len(matching) == 1, f"{page.name}: {len(matching)} rules match the command {command!r}"
        argv = matching[0](command)
        if isinstance(argv, str):  # skipped, with the reason
            continue
        assert argv is not None, f"{page.name}: the command {command!r} is refused by its rule"
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, f"{command!r} ended {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        outputs.append(proc.stdout)
    return outputs


def pgra(extra: list[str] | None = None, words: dict[str, str] | None = None, replace: dict[str, str] | None = None
         ) -> Callable[[str], list[str]]:
    """A rule's action: the ``pgra ...`` command through this interpreter, whole ``words`` swapped, substrings
    ``replace``d and ``extra`` added."""
    def argv(command: str) -> list[str]:
        args = [(words or {}).get(w, w) for w in shlex.split(command)[1:]]
        for old, new in (replace or {}).items():
            args = [w.replace(old, new) for w in args]
        return [sys.executable, "-c", CLI, *args, *(extra or [])]
    return argv


def _workdir(tmp_path: Path, *names: str) -> Path:
    """A folder holding links to the clone's ``names`` (models, examples, configs): the pages run from the root."""
    work = tmp_path / "clone"
    work.mkdir()
    for name in names:
        (work / name).symlink_to(ROOT / name)
    return work


def _env(work: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PGRA_OFFLINE": "1"}


def test_page_commands_join_continuations_and_drop_comments(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("text\n```bash\n# a comment\npgra a \\\n  --b c   # why\n\nmake x\n```\n```yaml\nk: v\n```\n"
                    "```bash\npgra z\n```\n")
    assert page_commands(page) == ["pgra a --b c", "make x", "pgra z"]


def test_tutorial_own_task_runs_as_written(tmp_path):
    """docs/tutorial-own-task.md on the packaged models, every experiment and analysis at --limit 8 (the page's
    own smoke run; the real run would train for minutes): the task reads, the index builds and answers, the grid
    and its analyses finish, and the finished PGRA cell predicts a new text."""
    for asset in ("models/minilm", "models/smollm2-135m", "models/bert2bert-minilm"):
        demo_asset(asset)
    work = _workdir(tmp_path, "models", "examples", "configs")
    small = pgra(["--limit", "8"])
    rules: list[Rule] = [
        (r"make prepare", lambda c: "the suite's set-up (make test) has prepared the models"),
        (r"source \.venv/bin/activate", lambda c: "the suite runs in the environment"),
        (r"pgra (tasks|build-index|search) .*", pgra()),
        (r"pgra experiment --config examples/own_task/experiment\.yaml( --limit 8)?( --dry-run)?",
         lambda c: pgra()(c) if "--limit" in c else small(c)),
        (r"pgra analyze --config examples/own_task/experiment\.yaml", small),
        (r"pgra predict --run runs/tickets/.*", pgra(replace={"runs/tickets/": "runs/tickets-limit8/"})),
    ]
    outputs = run_page(ROOT / "docs" / "tutorial-own-task.md", rules, work, _env(work))
    assert "labels (value: demonstration word / reader word)" in outputs[0]
    plan = next(o for o in outputs if "expected cost" in o)  # the dry run prices every stage and cell (issue 52.5)
    assert "cost unknown" not in plan and "the command's own" in plan
    out = work / "runs" / "tickets-limit8"
    assert (out / "results.md").is_file() and (out / "analysis" / "analysis.md").is_file()
    assert not (work / "runs" / "tickets").exists()  # the smoke run never writes the real run's folder
    assert re.search(r"\b(billing|technical|shipping)\b", outputs[-1])


def _tiny_table2(work: Path, corpus: Path, task: Path, bert: Path, opt: Path, t5: Path) -> None:
    """The paper's configs (``configs/paper/experiment_table2.yaml``, ``index_bert.yaml``) in ``work``, each kept
    as written but for what makes it tiny: the sky task, its corpus, random 2-layer models, 4 reader steps."""
    import yaml

    paper = work / "configs" / "paper"
    paper.mkdir(parents=True)
    (paper / "targets.yaml").symlink_to(ROOT / "configs" / "paper" / "targets.yaml")
    index = yaml.safe_load((ROOT / "configs" / "paper" / "index_bert.yaml").read_text())
    index.update(corpus=str(corpus))
    index["dense"].update(encoder=str(bert), max_length=32, batch_size=16, shard_size=8)
    (paper / "index_bert.yaml").write_text(yaml.safe_dump(index))
    grid = yaml.safe_load((ROOT / "configs" / "paper" / "experiment_table2.yaml").read_text())
    grid.update(tasks=[str(task)], seeds=[1], task_overrides={}, index=index)
    grid["rerank"].update(lm=str(opt), top_d=3, num_demos=2, max_tokens_per_batch=700, max_batch_size=64)
    grid["retrieve"].update(k=8)
    grid["reader"].update(model=str(t5), n_passages=3, max_length=48, batch_size=4, max_steps=4, eval_every=2,
                          mixed_precision="no", compile=False, compile_mode="default", pad_to_multiple=1,
                          adamw_impl="auto")
    grid["analysis"] = {"analyses": ["differences", "cost", "case_study"], "case_study": {"n": 2}}
    (paper / "experiment_table2.yaml").write_text(yaml.safe_dump(grid))


def test_tutorial_table2_runs_as_written_at_tiny_scale(tmp_path, corpus_txt, sky_task, tiny_bert, tiny_opt, tiny_t5):
    """docs/tutorial-table2.md with its configs made tiny (the sky task, random 2-layer models) and 8 GPUs as 2
    gloo processes: the index under torchrun, both dry runs, the grid under torchrun, an array task of the sbatch
    script, the submitit workers (``slurm.cluster=local``), the report beside the paper's table, both analyses, and
    the re-run after a job died. Set-up and the download need the network: skipped, but the page's torch pin and
    extras are checked against the project's."""
    import tomllib

    work = _workdir(tmp_path, "scripts", "examples")
    _tiny_table2(work, corpus_txt, sky_task, tiny_bert, tiny_opt, tiny_t5)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    makefile = (ROOT / "Makefile").read_text()
    env = {**_env(work), "OMP_NUM_THREADS": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "SLURM_CPUS_PER_TASK": "1", "SLURM_ARRAY_TASK_ID": "0"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]

    def pinned(command: str) -> str:
        assert command.split()[-1] in makefile, f"{command!r}: the Makefile installs another torch"
        return "needs the network; the pin is the Makefile's"

    def extras_exist(command: str) -> str:
        wanted = re.search(r"\[(.*)\]", command).group(1).split(",")
        assert set(wanted) <= set(extras), f"{command!r}: no such extra in pyproject.toml"
        return "needs the network; the extras exist"

    rules: list[Rule] = [
        (r"python3 -m venv \.venv|source \.venv/bin/activate", lambda c: "the suite runs in its environment"),
        (r"pip install torch==[\d.]+", pinned),
        (r"pip install -e \"\.\[[a-z,]+\]\"", extras_exist),
        (r"pgra download-data", lambda c: "needs the network (offline it stops with one error line, tested in "
                                          "tests/test_download.py)"),
        (r"torchrun --nproc-per-node 8 (scripts/\S+\.py) (.*)",
         lambda c: [*torchrun, *shlex.split(c)[3:]]),
        (r"pgra experiment --config configs/paper/experiment_table2\.yaml --dry-run --workers 8",
         pgra(words={"8": "2"})),
        (r"pgra experiment --config configs/paper/experiment_table2\.yaml --launcher slurm --workers 16 .*",
         pgra(["slurm.cluster=local"], words={"16": "2"})),
        (r"pgra (experiment|analyze|report) (?!.*(--launcher|--workers)).*", pgra()),
        (r"mkdir -p logs", lambda c: ["mkdir", "-p", "logs"]),
        (r"sbatch --array=\d+-\d+ (examples/slurm/\S+\.sbatch)", lambda c: ["bash", c.split()[-1]]),
    ]
    outputs = run_page(ROOT / "docs" / "tutorial-table2.md", rules, work, env)
    table = work / "runs" / "table2"
    assert (table / "results.md").is_file() and (table / "analysis" / "analysis.md").is_file()
    # the report beside the paper's numbers (none for the tiny task: said so)
    assert any("## Against the published numbers" in out for out in outputs)
    cells = sorted(p.parent.parent.name for p in table.glob("*/*/seed-1/cell.json"))
    assert cells == ["fid", "no_retrieval", "pgra"]
