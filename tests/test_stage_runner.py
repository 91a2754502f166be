"""The one stage runner refuses, before any work, a stage whose manifest could name no task."""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from pgra.core.errors import InputError
from pgra.stages import Stage
from pgra.stages.runner import run_stage


class _Orphan(Stage):
    family = kind = "orphan"
    reads = ()

    def config(self, request):
        return None

    def key_record(self, request, config):
        return {}

    def build(self, config, inputs, run):
        raise AssertionError("built although its manifest could name no task")


@dataclass
class _Config:
    out: str


def test_a_stage_reading_no_folder_with_a_task_is_refused_before_it_builds(tmp_path):
    out = tmp_path / "orphan"
    with pytest.raises(InputError, match="reads no folder that records a task"):
        run_stage(_Orphan("orphan"), _Config(str(out)), SimpleNamespace(is_main=True))
    assert not out.exists()  # nothing written


class _Shared(Stage):
    """A stage built in every process (as the built-in ones are): it opens its folder and names its task itself."""

    family = kind = "shared"
    reads = ()
    every_rank = True

    def config(self, request):
        return None

    def key_record(self, request, config):
        return {}

    def build(self, config, inputs, run):
        held = (run.out / ".pgra-lock").is_file()  # the runner holds the folder's lock while the stage builds
        run.begin()
        run.task = {"name": "sky"}
        run.split("test", lambda: [{"id": "1", "text": "a", "ctxs": []}])
        return {"held": held}


def test_the_runner_locks_and_claims_the_folder_of_every_stage(tmp_path):
    """The lock and the claim are the runner's, not each stage's: a stage's build runs under the folder's lock, its
    manifest is written by the runner from the fields the build returns, and a folder pgra did not make (a user's
    file in it) is refused before the build runs, the file kept."""
    out = tmp_path / "shared"
    assert run_stage(_Shared(), _Config(str(out)), SimpleNamespace(is_main=True)) == out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "shared" and manifest["held"] is True and manifest["counts"] == {"test": 1}
    assert manifest["task"] == {"name": "sky"} and not (out / ".pgra-lock").exists()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="which pgra did not write"):
        run_stage(_Shared(), _Config(str(theirs)), SimpleNamespace(is_main=True))
    assert sorted(p.name for p in theirs.iterdir()) == ["notes.txt"]
