"""pgra deletes or replaces only what it can prove it wrote (pgra.storage.ownership): a non-empty output folder it did not
make, a stale cell holding a user's file and a hand-written or hand-edited report are refused with one error line
(exit 2) and nothing is changed; its own folders are still resumed, rerun and re-reported."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from pgra.cli import main
from pgra.core.errors import InputError
from pgra.storage.ownership import RECORD, claim_folder, is_temp
from tests.conftest import one_error_line


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (links included, by their target's name) with its bytes."""
    return {str(p.relative_to(folder)): (p.read_bytes() if not p.is_symlink() else str(p.readlink()).encode())
            for p in sorted(folder.rglob("*")) if p.is_file() or p.is_symlink()}


def _train_argv(reranked, out, tiny_t5, *extra) -> list[str]:
    return ["train", "--data", str(reranked), "--out", str(out), "--model", str(tiny_t5), "n_passages=2",
            "max_length=48", "batch_size=4", "max_steps=2", "eval_every=0", "learning_rate=1e-3",
            "show_progress=false", *extra]


# ---------------------------------------------------------------- the record and the claim

def test_claim_refuses_a_folder_pgra_did_not_make_and_records_its_own(tmp_path):
    users = tmp_path / "mine"
    (users / "best").mkdir(parents=True)
    (users / "best" / "model.safetensors").write_bytes(b"my weights")
    (users / "empty").mkdir()  # an empty folder holds nothing to lose
    before = _snapshot(users)
    with pytest.raises(InputError, match=r"holds 'best', which pgra did not write.*nothing was changed"):
        claim_folder(users, "reader")
    assert _snapshot(users) == before and not (users / RECORD).exists()
    assert claim_folder(tmp_path / "new", "reader") and (tmp_path / "new" / RECORD).exists()
    assert not claim_folder(tmp_path / "new", "reader")  # claimed again: already its own
    # a folder an older pgra made (before the record existed) is recognised by what only pgra writes there
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "train_log.jsonl").write_text("")
    assert claim_folder(tmp_path / "old", "reader")
    from pgra.storage import lock, ownership

    assert ownership.LOCK_FILE == lock.LOCK_FILE  # the lock's name, spelled out (pgra.storage.lock imports ownership)


def test_a_folder_pgra_made_for_one_kind_is_refused_to_another(tmp_path, corpus_txt, capsys):
    """The record names the kind pgra made the folder for: any pgra folder used to be accepted whatever its kind,
    so `pgra fid export --out INDEX` replaced the index's manifest.json. Another stage's output there is refused,
    nothing changed; a cell still takes its method's run (HOSTED)."""
    index = tmp_path / "idx"
    assert main(["build-index", "--corpus", str(corpus_txt), "--out", str(index), "--retriever", "bm25"]) == 0
    before = _snapshot(index)
    for kind in ("fid-export", "reader", "candidates"):
        with pytest.raises(InputError, match=r"idx is pgra's 'index' folder .*not a " + kind + r" one.*nothing was"):
            claim_folder(index, kind)
    assert _snapshot(index) == before and not claim_folder(index, "index")
    cell = tmp_path / "cell"
    assert claim_folder(cell, "cell")
    (cell / ".cell_key").write_text("k")
    assert not claim_folder(cell, "reader") and not claim_folder(cell, "icl")  # the cell's method's run
    with pytest.raises(InputError, match="is pgra's 'cell' folder"):
        claim_folder(cell, "fid-export")
    assert json.loads((cell / RECORD).read_text())["kind"] == "cell"
    # through a stage's lock (every writer): `pgra retrieve --out` a reader's folder pgra made, no manifest yet
    run = tmp_path / "run"
    claim_folder(run, "reader")
    (run / "train_log.jsonl").write_text("{}\n")
    line = one_error_line(["retrieve", "--task", "sst2", "--index", str(index), "--out", str(run)], capsys)
    assert "is pgra's 'reader' folder" in line and "field 'out'" in line
    assert (run / "train_log.jsonl").read_text() == "{}\n"


def test_a_lock_on_its_way_is_pgras_and_never_dropped(tmp_path, monkeypatch):
    """Another job's lock between its write and its link (``.<lock>.<pid>.<hex>.new``) is neither a user's file nor
    a leftover: claiming the folder meanwhile keeps it (dropping it made that job's link fail)."""
    from pgra.storage.lock import hold_lock

    folder = tmp_path / "out"
    claim_folder(folder, "output")
    on_its_way = folder / ".report.claim.4242.0a1b2c3d.new"
    on_its_way.write_text("{}")
    assert claim_folder(folder, "output") is False and on_its_way.exists()
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / on_its_way.name).write_text("{}")
    assert claim_folder(fresh, "output") is True  # nothing of a user's in it
    import os

    import pgra.storage.lock as lock_mod
    from pgra.storage.ownership import entries

    names, link = [], os.link
    monkeypatch.setattr(lock_mod.os, "link", lambda src, dst: (names.append(Path(src).name), link(src, dst))[1])
    with hold_lock(folder / ".x.claim", "test"):  # the lock's own temporary name is of that form
        pass
    assert names and not is_temp(names[0])  # claim_folder's drop_temp leaves it alone
    (folder / names[0]).write_text("{}")
    assert (folder / names[0]) not in entries(folder)  # and it is no user's file


def test_leftover_temporary_files_are_removed_only_in_pgras_own_folders(tmp_path, corpus_txt):
    from pgra.retrieval.index import IndexConfig, build_index

    out = tmp_path / "index"
    cfg = IndexConfig(corpus=str(corpus_txt), out=str(out), retriever="bm25", show_progress=False)
    build_index(cfg)
    leftovers = [out / ".manifest.json.k3j_h5g6.tmp", out / ".corpus.ab12cd34"]  # killed before the rename
    leftovers[0].write_text("{")
    leftovers[1].mkdir()
    (leftovers[1] / "part").write_text("x")
    (out / ".notes.tmp").write_text("mine")  # not a name pgra gives its temporary files
    assert all(is_temp(p.name) for p in leftovers) and not is_temp(".notes.tmp")
    build_index(cfg)
    assert not any(p.exists() for p in leftovers) and (out / ".notes.tmp").read_text() == "mine"
    # in a folder pgra cannot prove it made, a file with such a name is left alone (and the folder refused)
    users = tmp_path / "users"
    users.mkdir()
    (users / ".x.abcdefgh.tmp").write_text("mine")
    (users / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="notes.txt"):
        build_index(IndexConfig(corpus=str(corpus_txt), out=str(users), retriever="bm25", show_progress=False))
    assert sorted(p.name for p in users.iterdir()) == [".x.abcdefgh.tmp", "notes.txt"]


# ---------------------------------------------------------------- train, train-simcse, tasks export

def test_train_and_evaluate_refuse_a_users_files_and_a_linked_best(reranked, tmp_path, tiny_t5, capsys):
    out = tmp_path / "run"
    (out / "best").mkdir(parents=True)
    (out / "best" / "model.safetensors").write_bytes(b"the user's own model")
    (out / "best" / "config.json").write_text("{}")
    before = _snapshot(out)
    line = one_error_line(_train_argv(reranked, out, tiny_t5), capsys)
    assert str(out) in line and "'best'" in line and "field 'out'" in line
    assert _snapshot(out) == before
    # its own run folder: trained, then re-run (resumed from its checkpoint), then a linked best/ is refused at once
    run = tmp_path / "own"
    assert main(_train_argv(reranked, run, tiny_t5)) == 0
    assert (run / RECORD).exists() and (run / "best" / "model.safetensors").exists()
    assert main(_train_argv(reranked, run, tiny_t5)) == 0
    # `pgra evaluate --out` a folder holding the user's own metrics: refused; its default folder: written
    evals = tmp_path / "evals"
    evals.mkdir()
    (evals / "metrics_test.json").write_text("mine")
    line = one_error_line(["evaluate", "--run", str(run), "--out", str(evals)], capsys)
    assert "'metrics_test.json'" in line and (evals / "metrics_test.json").read_text() == "mine"
    assert main(["evaluate", "--run", str(run)]) == 0 and main(["evaluate", "--run", str(run)]) == 0
    elsewhere = tmp_path / "elsewhere"
    shutil.move(run / "best", elsewhere)
    (run / "best").symlink_to(elsewhere)
    before = _snapshot(elsewhere)
    line = one_error_line(_train_argv(reranked, run, tiny_t5, "max_steps=3"), capsys)
    assert "best is a symbolic link" in line
    assert _snapshot(elsewhere) == before and (run / "best").is_symlink()
    assert json.loads((run / "manifest.json").read_text())["steps"] == 2  # the finished run is untouched


def test_train_simcse_refuses_another_model_folder(tmp_path, tiny_bert, corpus_txt, capsys):
    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    before = _snapshot(model)
    line = one_error_line(["train-simcse", "--corpus", str(corpus_txt), "--encoder", str(tiny_bert), "--out",
                           str(model), "max_steps=1"], capsys)
    assert "which pgra did not write" in line and "field 'out'" in line
    assert _snapshot(model) == before


def test_a_killed_export_leaves_a_temporary_file_the_next_run_removes(tmp_path, sky_task):
    import os
    import subprocess
    import sys

    from pgra.core.faults import ENV, KILLED_EXIT

    out = tmp_path / "exported"
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, ENV: "write:dev.jsonl",
           "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", "import sys; from pgra.cli import main; sys.exit(main(sys.argv[1:]))",
                           "tasks", "export", str(sky_task), "--out", str(out)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == KILLED_EXIT, proc.stderr[-2000:]
    (left,) = [p for p in out.iterdir() if p.name.startswith(".dev.jsonl.")]  # written, never renamed
    assert is_temp(left.name)
    assert main(["tasks", "export", str(sky_task), "--out", str(out)]) == 0
    assert not left.exists() and (out / "dev.jsonl").exists() and not [p for p in out.iterdir() if is_temp(p.name)]


def test_tasks_export_refuses_a_users_files_and_re_exports_its_own(tmp_path, sky_task, capsys):
    out = tmp_path / "exported"
    out.mkdir()
    (out / "train.jsonl").write_text('{"my": "own data"}\n')
    before = _snapshot(out)
    line = one_error_line(["tasks", "export", str(sky_task), "--out", str(out)], capsys)
    assert "'train.jsonl'" in line and "field 'out'" in line
    assert _snapshot(out) == before
    ours = tmp_path / "ours"
    for _ in range(2):  # its own folder is exported again
        assert main(["tasks", "export", str(sky_task), "--out", str(ours)]) == 0
    assert (ours / "train.jsonl").exists() and (ours / RECORD).exists()


# ---------------------------------------------------------------- the experiment and its report

@pytest.fixture()
def knn_grid(tmp_path, corpus_txt, sky_task) -> Path:
    """A one-cell grid (the kNN vote: no model to train) as a config file."""
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({
        "out": str(tmp_path / "exp"), "tasks": [str(sky_task)], "methods": ["knn_vote"], "seeds": [1],
        "index": {"corpus": str(corpus_txt), "out": str(tmp_path / "index"), "retriever": "bm25"},
        "retrieve": {"k": 8}, "knn_vote": {"k": 3}, "show_progress": False, "report": True}))
    return path


def test_a_stale_cell_holding_a_users_file_is_refused_and_one_of_pgras_files_reruns(knn_grid, tmp_path, capsys):
    exp = tmp_path / "exp"
    assert main(["experiment", "--config", str(knn_grid)]) == 0
    cell = exp / "sky" / "knn_vote" / "seed-1"
    (cell / "notes.txt").write_text("why this run matters")
    before = _snapshot(exp)
    line = one_error_line(["experiment", "--config", str(knn_grid), "knn_vote.k=5"], capsys)
    assert str(cell) in line and "'notes.txt'" in line and "nothing was changed" in line
    assert _snapshot(exp) == before
    # the user moves the note away: the stale cell holds only pgra's files and is rerun from scratch
    (cell / "notes.txt").unlink()
    capsys.readouterr()
    assert main(["experiment", "--config", str(knn_grid), "knn_vote.k=5"]) == 0
    assert "settings changed: rerunning from scratch" in capsys.readouterr().out
    assert json.loads((cell / "cell.json").read_text())["settings"]["k"] == 5


def test_a_cell_folder_pgra_did_not_make_is_never_deleted(knn_grid, tmp_path, capsys):
    users = tmp_path / "exp" / "sky" / "knn_vote" / "seed-1"
    (users / "best").mkdir(parents=True)
    (users / "best" / "weights.bin").write_bytes(b"mine")
    before = _snapshot(tmp_path / "exp")
    line = one_error_line(["experiment", "--config", str(knn_grid)], capsys)  # not an experiment pgra made
    assert str(tmp_path / "exp") in line and "'sky'" in line
    assert _snapshot(tmp_path / "exp") == before
    shutil.rmtree(tmp_path / "exp")
    assert main(["experiment", "--config", str(knn_grid)]) == 0
    # in pgra's experiment, a cell folder holding only what a user put there (names pgra uses) is not pgra's
    shutil.rmtree(users)
    (users / "best").mkdir(parents=True)
    (users / "best" / "weights.bin").write_bytes(b"mine")
    (users / "train_log.jsonl").write_text("mine")
    before = _snapshot(tmp_path / "exp")
    line = one_error_line(["experiment", "--config", str(knn_grid)], capsys)
    assert str(users) in line and "'best', 'train_log.jsonl'" in line
    assert _snapshot(tmp_path / "exp") == before


def test_report_files_pgra_did_not_write_are_refused_its_own_are_remade(knn_grid, tmp_path, capsys):
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "results.md").write_text("# my own notes\n")
    # a report file pgra did not write, in a folder pgra did not make, is refused before the grid runs
    line = one_error_line(["experiment", "--config", str(knn_grid)], capsys)
    assert "results.md was not written by pgra" in line and (exp / "results.md").read_text() == "# my own notes\n"
    (exp / "results.md").unlink()
    assert main(["experiment", "--config", str(knn_grid)]) == 0
    assert main(["report", str(exp)]) == 0  # its own report is made again
    made = (exp / "results.md").read_text()
    # a hand-edited report is kept: `pgra report` and `pgra experiment` refuse before writing anything
    (exp / "results.md").write_text(made + "\nMy conclusions.\n")
    before = _snapshot(exp)
    line = one_error_line(["report", str(exp)], capsys)
    assert "results.md was changed after pgra wrote it" in line and "field 'directory'" in line
    line = one_error_line(["experiment", "--config", str(knn_grid), "knn_vote.k=5"], capsys)
    assert "results.md was changed after pgra wrote it" in line
    assert _snapshot(exp) == before
    (exp / "results.md").rename(exp / "my_results.md")
    assert main(["report", str(exp)]) == 0 and (exp / "results.md").read_text() == made
    # a report file the user put beside pgra's is refused too (never recorded)
    (exp / "results_data.js").write_text("my script")
    assert "results_data.js was not written by pgra" in one_error_line(["report", str(exp)], capsys)
    assert (exp / "results_data.js").read_text() == "my script"


def test_a_report_an_older_pgra_wrote_is_replaced(knn_grid, tmp_path):
    exp = tmp_path / "exp"
    assert main(["experiment", "--config", str(knn_grid)]) == 0
    record = json.loads((exp / RECORD).read_text())
    (exp / RECORD).write_text(json.dumps({k: v for k, v in record.items() if k != "files"}))  # before the record
    (exp / "results.md").write_text("older\n")
    assert main(["report", str(exp)]) == 0 and (exp / "results.md").read_text() != "older\n"
    assert set(json.loads((exp / RECORD).read_text())["files"]) >= {"results.md", "results.json", "results.html"}
