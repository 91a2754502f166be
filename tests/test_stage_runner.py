"""The one stage runner refuses, before any work, a stage whose manifest could name no task."""

from __future__ import annotations

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
