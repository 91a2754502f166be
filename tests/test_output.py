"""Quiet, honest output: progress lines in logs, tqdm on a terminal, library chatter silenced unless -v."""

from __future__ import annotations

import io
import logging
import types
import warnings
from pathlib import Path

import pytest

import pgra.core.progress as progress_mod
from pgra.core.progress import LogProgress, progress
from pgra.core.verbosity import EXPECTED_WARNINGS, configure_output


class _FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class _Captured:
    """stderr as pytest captures it (not a TTY), read back without draining."""

    def __init__(self, capsys) -> None:
        self.capsys, self.text = capsys, ""

    def getvalue(self) -> str:
        self.text += self.capsys.readouterr().err
        return self.text


@pytest.fixture
def log_stderr(monkeypatch, capsys):
    """stderr as a log (pytest's capture: not a TTY) and a clock the test moves by hand."""
    clock = _FakeClock()
    monkeypatch.setattr(progress_mod, "time", types.SimpleNamespace(monotonic=clock))
    return _Captured(capsys), clock


def test_log_mode_prints_at_most_one_line_per_interval_and_a_final_line(log_stderr):
    stream, clock = log_stderr
    bar = progress(total=450, desc="training", unit="steps", interval=10)
    assert isinstance(bar, LogProgress)
    for step in range(450):  # 45 s in all: a line at 10, 20, 30 and 40 s
        clock.t += 0.1
        bar.update(1)
        bar.set_postfix(loss=f"{10 / (step + 1):.2f}")
        if step == 99:
            assert stream.getvalue().count("\n") == 1
    assert stream.getvalue().count("\n") == 4
    bar.close()
    bar.close()  # idempotent
    lines = stream.getvalue().splitlines()
    assert len(lines) == 5
    assert "\r" not in stream.getvalue()
    assert lines[0] == "training: 100/450 steps (22%), 10s elapsed, ~35s left, loss=0.10"
    assert lines[-1] == "training: 450/450 steps (100%), 45s elapsed, loss=0.02"


def test_log_mode_final_line_not_repeated(log_stderr):
    stream, clock = log_stderr
    bar = progress(total=4, desc="encoding corpus", unit=" texts", interval=1)
    clock.t += 2
    bar.update(4)
    bar.close()
    assert stream.getvalue() == "encoding corpus: 4/4 texts (100%), 2s elapsed\n"


def test_log_mode_passes_iteration_through_and_closes(log_stderr):
    stream, clock = log_stderr
    items = list(range(7))
    seen = []
    for x in progress(items, desc="reading", unit=" texts", interval=5):
        clock.t += 1
        seen.append(x)
    assert seen == items
    lines = stream.getvalue().splitlines()
    assert lines[-1] == "reading: 7/7 texts (100%), 7s elapsed"
    assert len(lines) == 2  # one at 5 s, one final


def test_log_mode_context_manager_postfix_str_and_unknown_total(log_stderr):
    stream, clock = log_stderr
    with progress(desc="downloading", unit="B", unit_scale=True, interval=1) as bar:
        clock.t += 2
        bar.set_postfix_str("file.tar")
        bar.update(2_500_000)
    assert stream.getvalue().splitlines() == ["downloading: 2.5MB, 2s elapsed, file.tar"]


def test_interval_from_environment(log_stderr, monkeypatch):
    stream, clock = log_stderr
    monkeypatch.setenv("PGRA_PROGRESS_INTERVAL", "3")
    bar = progress(total=10)
    clock.t += 2
    bar.update(1)
    assert stream.getvalue() == ""
    clock.t += 1
    bar.update(1)
    assert stream.getvalue() == "2/10 (20%), 3s elapsed, ~12s left\n"


def test_disabled_prints_nothing(log_stderr):
    stream, _ = log_stderr
    bar = progress(range(3), total=3, disable=True)
    assert list(bar) == [0, 1, 2]
    bar.update(2)
    bar.set_postfix(loss=1)
    bar.close()
    assert stream.getvalue() == ""


def test_tty_mode_is_a_tqdm(monkeypatch):
    from tqdm import tqdm

    monkeypatch.setattr("sys.stderr", _Stream(tty=True))  # in the test body: pytest resets sys.stderr per phase
    bar = progress(range(3), desc="x")
    assert isinstance(bar, tqdm)
    assert bar.mininterval == 1.0
    assert list(bar) == [0, 1, 2]


# --- configure_output ------------------------------------------------------------------------------------------

@pytest.fixture
def isolated_output(monkeypatch):
    """Restore logging levels, warning filters and the env vars configure_output sets."""
    from transformers.utils import logging as hf_logging

    for key in ("TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS", "ACCELERATE_LOG_LEVEL", "PGRA_QUIET"):
        monkeypatch.delenv(key, raising=False)
    names = ("transformers", "accelerate", "huggingface_hub", "DeepSpeed")
    levels = {n: logging.getLogger(n).level for n in names}
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_warning()
    hf_logging.enable_progress_bar()
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect()
    root = logging.getLogger("transformers")
    root.addHandler(handler)
    with warnings.catch_warnings():
        warnings.resetwarnings()
        warnings.simplefilter("always")
        yield records
    root.removeHandler(handler)
    for n, level in levels.items():
        logging.getLogger(n).setLevel(level)
    (hf_logging.enable_progress_bar if bars else hf_logging.disable_progress_bar)()


def test_quiet_silences_library_chatter_but_not_pgra_warnings(isolated_output):
    from transformers.utils import logging as hf_logging

    configure_output(False)
    configure_output(False)  # idempotent
    records = isolated_output
    hf_logging.get_logger("transformers.modeling_utils").warning("This checkpoint seem corrupted. ...")
    assert records == []
    assert not hf_logging.is_progress_bar_enabled()
    assert logging.getLogger("accelerate.utils.other").getEffectiveLevel() >= logging.ERROR
    with warnings.catch_warnings(record=True) as caught:
        for category, _, module, example in EXPECTED_WARNINGS:
            warnings.warn_explicit(example, category, f"{module.replace('.', '/')}.py", 1, module=module)
        warnings.warn("pgra: 3 weights are not in the checkpoint", UserWarning, stacklevel=1)
        warnings.warn("Version v4.12.0 introduces ...", FutureWarning, stacklevel=1)  # not from its module
    shown = [str(w.message) for w in caught]
    assert shown == ["pgra: 3 weights are not in the checkpoint", "Version v4.12.0 introduces ..."]


def test_a_quiet_commands_child_processes_are_quiet_too(isolated_output, monkeypatch, tmp_path):
    """A grid's cells and workers run in child processes, which inherit the environment but not the warning
    filters: they quiet themselves when their parent was quiet (and only then)."""
    import os
    import subprocess
    import sys

    configure_output(False)
    assert os.environ["PGRA_QUIET"] == "1"
    category, _, module, example = EXPECTED_WARNINGS[0]
    child = ("import warnings; from pgra.core.verbosity import configure_child_output; configure_child_output(); "
             f"warnings.warn_explicit({example!r}, {category.__name__}, {module.replace('.', '/')!r} + '.py', 1, "
             f"module={module!r})")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    quiet = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True)
    loud = subprocess.run([sys.executable, "-c", child], env={k: v for k, v in env.items() if k != "PGRA_QUIET"},
                          capture_output=True, text=True)
    assert quiet.returncode == loud.returncode == 0
    assert example[:30] not in quiet.stderr and example[:30] in loud.stderr
    # the cell's and the worker's entry points call it first
    import pgra.core.verbosity
    from pgra.experiment import launch

    called = []
    monkeypatch.setattr(pgra.core.verbosity, "configure_child_output", lambda: called.append(1))
    monkeypatch.setenv(launch.WORKER_ENV, "test")  # run_worker sets it: restored after the test
    with pytest.raises(KeyError):
        launch.run_cell_process({})
    with pytest.raises(KeyError):
        launch.run_worker({}, "w")
    assert called == [1, 1]
    # a verbose command started from a quiet one shows everything, and so do its cells
    configure_output(True)
    assert "PGRA_QUIET" not in os.environ


def test_verbose_keeps_everything(isolated_output):
    from transformers.utils import logging as hf_logging

    configure_output(True)
    records = isolated_output
    hf_logging.get_logger("transformers.modeling_utils").warning("This checkpoint seem corrupted. ...")
    assert [r.getMessage() for r in records] == ["This checkpoint seem corrupted. ..."]
    assert hf_logging.is_progress_bar_enabled()
    with warnings.catch_warnings(record=True) as caught:
        for category, _, module, example in EXPECTED_WARNINGS:
            warnings.warn_explicit(example, category, f"{module.replace('.', '/')}.py", 1, module=module)
    assert len(caught) == len(EXPECTED_WARNINGS)


# --- what stays visible: real missing weights ---------------------------------------------------------------

def _bert2bert(src):
    """A bert2bert reader built from ``src`` as ``pgra prepare-demo`` builds the demo's."""
    import torch
    from transformers import EncoderDecoderModel

    torch.manual_seed(0)
    model = EncoderDecoderModel.from_encoder_decoder_pretrained(str(src), str(src), encoder_add_pooling_layer=False)
    model.config.decoder_start_token_id, model.config.pad_token_id = 2, 0  # [CLS], [PAD]
    return model


def test_bert2bert_line_names_the_new_weights(tiny_bert, recwarn):
    from pgra.demo.prepare import _describe_new_weights

    line = _describe_new_weights(_bert2bert(tiny_bert), tiny_bert)
    # 2 layers x 10 cross-attention tensors; the tiny BERT has no MLM head either: transform (4) + bias
    assert line == ("bert2bert-minilm: MiniLM encoder + decoder, new cross-attention (20 tensors) and LM-head "
                    "transform + bias (5) initialised at random, seed 0 (expected)")
    assert not [w for w in recwarn if "bert2bert" in str(w.message)]


def test_bert2bert_warns_when_real_weights_are_missing(tiny_bert, tmp_path):
    from safetensors.torch import load_file, save_file

    from pgra.demo.prepare import _describe_new_weights

    model = _bert2bert(tiny_bert)
    broken = tmp_path / "broken"
    broken.mkdir()
    tensors = load_file(str(tiny_bert / "model.safetensors"))
    del tensors["encoder.layer.1.output.dense.weight"]
    save_file(tensors, str(broken / "model.safetensors"))
    with pytest.warns(UserWarning, match=r"bert2bert-minilm: 2 weights besides cross-attention .*layer\.1\.output"):
        _describe_new_weights(model, broken)


def test_reader_load_quiet_for_the_pooler_loud_for_real_weights(tiny_bert, tmp_path, isolated_output):
    from safetensors.torch import load_file, save_file

    from pgra.reader.fid import FiDReader

    configure_output(False)
    good = tmp_path / "reader"
    _bert2bert(tiny_bert).save_pretrained(str(good))
    with warnings.catch_warnings(record=True) as caught:
        FiDReader.from_pretrained(str(good))  # missing only the encoder pooler FiD drops: nothing to say
    assert [str(w.message) for w in caught] == []
    tensors = load_file(str(good / "model.safetensors"))
    del tensors["decoder.bert.encoder.layer.0.crossattention.self.query.weight"]
    save_file(tensors, str(good / "model.safetensors"), metadata={"format": "pt"})
    with warnings.catch_warnings(record=True) as caught:
        FiDReader.from_pretrained(str(good))
    shown = [str(w.message) for w in caught]
    assert len(shown) == 1 and "1 weights are not in the checkpoint" in shown[0]
    assert "crossattention.self.query.weight" in shown[0]
    assert isolated_output == []  # transformers' own load report stayed quiet


def test_a_library_that_resets_its_logger_level_stays_quiet(monkeypatch):
    """DeepSpeed sets its logger's level when imported; the quiet filter survives that."""
    logger = logging.getLogger("DeepSpeed")
    monkeypatch.setattr(logger, "filters", [])
    monkeypatch.setattr(logger, "handlers", [])
    level = logger.level
    try:
        configure_output(False)
        logger.setLevel(logging.INFO)  # what deepspeed.utils.logging does on import
        stream = io.StringIO()
        logger.addHandler(logging.StreamHandler(stream))
        logger.warning("Setting accelerator to CPU.")
        logger.error("a real error")
        assert stream.getvalue() == "a real error\n"
    finally:
        logger.setLevel(level)


@pytest.mark.parametrize("module, warned", [("pgra.experiment.child", False), ("pgra.experiment.launch", True)])
def test_a_grids_child_processes_start_without_runpys_warning(tmp_path, module, warned):
    """A grid's workers and cells run ``python -m pgra.experiment.child``: the package imports ``launch``, so running
    ``launch`` itself with -m (as they once did) printed runpy's RuntimeWarning in every cell."""
    import os
    import subprocess
    import sys

    bad = tmp_path / "cell.json"
    bad.write_text("{not json")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    done = subprocess.run([sys.executable, "-m", module, "cell", str(bad)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert ("found in sys.modules" in done.stderr) is warned
    if not warned:  # a spec it cannot read, or bad arguments: an error line, exit code 2
        assert done.returncode == 2
        assert done.stderr.strip().splitlines()[-1].startswith(f"error: cannot read the spec {bad}: ")
        usage = subprocess.run([sys.executable, "-m", module, "cel", str(bad)], env=env, capture_output=True,
                               text=True, timeout=120)
        assert usage.returncode == 2 and usage.stderr.strip().splitlines()[-1].startswith("usage: ")


# --- the Python API: as quiet as the CLI, and the user's settings left as they were --------------------------

@pytest.mark.parametrize("hub_bars_env", [None, "1"])
def test_pipeline_is_quiet_and_leaves_the_libraries_settings_alone(tmp_path, corpus_txt, sky_task, tiny_opt,
                                                                  tiny_bert2bert, isolated_output, capfd,
                                                                  monkeypatch, hub_bars_env):
    """``Pipeline.load(run).predict(texts)`` on a bert2bert reader (whose scoring raises transformers' expected
    FutureWarning) prints no progress bar, log line or warning; afterwards transformers' verbosity, its
    progress bars and the warning filters are the user's again. ``verbose=True`` shows them. Also with the Hub's
    progress bars switched off by its environment variable (set by a user, or by the CLI earlier in the process):
    restoring them then raises no warning of the Hub's."""
    from transformers.utils import logging as hf_logging

    if hub_bars_env is None:
        monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    else:
        monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", hub_bars_env)

    from pgra.core.config import from_dict
    from pgra.experiment import Experiment, ExperimentConfig
    from pgra.serving.pipeline import Pipeline
    from tests.test_experiment import _config

    grid = _config(tmp_path, corpus_txt, sky_task, tiny_opt, tiny_bert2bert, methods=["fid"], seeds=[1],
                   report=False)
    assert Experiment(from_dict(ExperimentConfig, grid)).run() == []
    run = Path(grid["out"]) / "sky" / "fid" / "seed-1"
    filters, log_filters = list(warnings.filters), list(logging.getLogger("transformers").filters)
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    capfd.readouterr()
    isolated_output.clear()  # the grid's own
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pipe = Pipeline.load(run)  # (kept: a pipeline dropped here closes no files, a ResourceWarning)
        out = pipe.predict(["The moon is bright.", "A river runs by the town."])
    assert len(out) == 2 and all(o["prediction"] in ("sky", "town") for o in out)
    assert [str(w.message) for w in caught] == []
    assert capfd.readouterr() == ("", "")
    assert isolated_output == []  # no log record passed transformers' logger
    # the user's settings, as they were before the call
    assert hf_logging.get_verbosity() == verbosity and hf_logging.is_progress_bar_enabled() == bars
    assert warnings.filters == filters
    assert logging.getLogger("transformers").filters == log_filters
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loud = Pipeline.load(run, verbose=True)
        loud.predict(["The moon is bright."])
    assert any(issubclass(w.category, FutureWarning) for w in caught)
