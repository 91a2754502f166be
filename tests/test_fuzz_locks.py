"""Fuzzing the lock files jobs share (pgra/storage/lock.py, pgra/experiment/claims.py): whatever a `.pgra-lock`, a claim
(`.<name>.claim`) or a job's registration (`.job-<id>.claim`) holds (hand-edited fields of any type, huge or
infinite numbers, bytes that are no JSON) and however old it is, taking it, probing it or reading it gives a
result or pgra's own error (OutputBusyError, InputError), never another exception. Plain regression tests of what
the fuzzing found follow the properties."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgra.core.errors import InputError, PgraError
from pgra.storage.lock import LOCK_FILE, holder, output_lock, validate
from tests.fuzzing import FUZZ, scalars, values

HOST = socket.gethostname()
pids = st.one_of(st.sampled_from([0, 1, -1, os.getpid(), 2**31 - 1, 2**31, 2**63, 10**30, 99999999, True]),
                 st.integers(-(2**70), 2**70), scalars)
hosts = st.one_of(st.sampled_from([HOST, "node-17", ""]), scalars)
times = st.one_of(st.sampled_from([time.time(), 0, -1, 1e300, 10**30]), st.floats(allow_nan=True,
                                                                                allow_infinity=True), scalars)
lock_object = st.fixed_dictionaries({}, optional={
    "pid": pids, "host": hosts, "command": st.one_of(st.just("pgra train"), scalars, values()), "started": times,
    "pid_start": st.one_of(st.just("ticks:1"), scalars), "job": scalars, "stale_after": times,
    "settings": values()})
raw = st.sampled_from([b"", b" ", b"{", b"[]", b"null", b"{}", b"\xef\xbb\xbf{}", b"[" * 3000, b"\xff\xfe",
                       b'{"pid": ' + b"9" * 5000 + b', "host": "h"}', b'{"pid": NaN, "host": "h"}',
                       b'{"pid": 1, "host": "h", "started": -Infinity}'])


@st.composite
def lock_bytes(draw: st.DrawFn) -> bytes:
    """A lock as pgra writes it but with fuzzed fields (JSON's NaN and Infinity included), odd bytes, or any."""
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return draw(st.binary(max_size=80))
    if kind == 1:
        return draw(raw)
    return json.dumps(draw(lock_object), allow_nan=True).encode("utf-8", "surrogatepass")


def _place(path: Path, content: bytes, age: float) -> None:
    path.write_bytes(content)
    then = time.time() - age
    os.utime(path, (then, then))


ages = st.sampled_from([0.0, 3600.0])
stale_afters = st.sampled_from([None, 0.5, 600.0])


@FUZZ
@given(lock_bytes(), ages, stale_afters)
def test_any_output_lock_is_taken_or_refused_by_pgras_own_error(content: bytes, age: float, stale: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp, mock.patch("pgra.storage.lock.SETTLE_S", 0.0), \
            mock.patch.dict(os.environ, {"PGRA_LOCK_STALE_AFTER_S": str(stale)} if stale else {}):
        out = Path(tmp) / "out"
        out.mkdir()
        _place(out / LOCK_FILE, content, age)
        info = holder(out / LOCK_FILE, stale)
        assert info is None or isinstance(info, dict)
        with contextlib.suppress(PgraError), output_lock(out, "fuzz"):
            assert validate((out / LOCK_FILE).read_bytes())[0] is not None  # what it holds now is valid
        validate(content)


@FUZZ
@given(lock_bytes(), ages, stale_afters)
def test_any_claim_is_claimed_skipped_or_probed_without_another_exception(content: bytes, age: float,
                                                                          stale: Any) -> None:
    from pgra.experiment.claims import claim_path, is_claimed, try_claim

    with tempfile.TemporaryDirectory() as tmp, mock.patch("pgra.storage.lock.SETTLE_S", 0.0):
        cell = Path(tmp) / "sky" / "fid" / "seed-1"
        cell.parent.mkdir(parents=True)
        _place(claim_path(cell), content, age)
        assert is_claimed(cell, "sky/fid/seed-1", stale) in (True, False)
        assert claim_path(cell).read_bytes() == content  # probing only looks
        claim = try_claim(cell, "sky/fid/seed-1", stale)
        if claim is not None:
            claim.close()
        other = try_claim(cell.parent / "seed-2", "sky/fid/seed-2", stale)  # the other cells go on
        assert other is not None
        other.close()


@FUZZ
@given(lock_bytes(), st.one_of(values(), st.dictionaries(st.sampled_from(["reader", "knn_vote", "index"]),
                                                         values(), max_size=3)), ages)
def test_any_job_registration_is_shared_refused_or_ignored(content: bytes, settings: Any, age: float) -> None:
    """A registration whose holder looks alive (pid 1 on this host) with fuzzed settings: this job's settings
    either match, or it is refused by an InputError naming a setting; an unreadable one is judged as a lock."""
    from pgra.experiment.claims import check_settings

    mine = {"reader": {"learning_rate": 0.001}, "knn_vote": {"k": 3}}
    with tempfile.TemporaryDirectory() as tmp, mock.patch("pgra.storage.lock.SETTLE_S", 0.0):
        out = Path(tmp)
        live = json.dumps({"pid": 1, "host": HOST, "command": "pgra experiment", "started": time.time(),
                           "settings": settings}, allow_nan=True).encode("utf-8", "surrogatepass")
        _place(out / ".job-a.claim", live, age)
        _place(out / ".job-b.claim", content, age)
        try:
            check_settings(out, mine, 600.0)
        except InputError as e:
            assert "field '" in str(e) and "other settings" in str(e)


# ------------------------------------------------------------------ what the fuzzing found (shrunk examples)
@pytest.mark.parametrize(("content", "problem"), [
    (b'{"pid": 1, "host": "h", "started": Infinity}', "field 'started' is inf"),
    (b'{"pid": 100000000000000000000, "host": "h"}', "field 'pid' is 100000000000000000000, not a process id"),
    (b'{"pid": true, "host": "h"}', "field 'pid' is True"),
    (b'{"pid": 5, "host": null}', "field 'host' is None"),
    (b'{"host": "h"}', "field 'pid' is missing"),
    (b"[" * 3000, "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[1]", "not a JSON object"),
])
def test_invalid_lock_contents_are_named(content: bytes, problem: str) -> None:
    info, why = validate(content)
    assert info is None and why.startswith(problem)
