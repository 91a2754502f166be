"""A model path or hub id that cannot be loaded is one `error:` line naming it (exit 2), never a traceback."""

import pytest

from pgra.cli import main


@pytest.mark.parametrize("kind", ["missing folder", "empty folder"])
def test_unloadable_models_are_one_error_line(kind, tmp_path, corpus_txt, candidates, capsys):
    bad = tmp_path / "no-such-model"
    if kind == "empty folder":
        bad.mkdir()
    commands = {
        "encoder": ["build-index", "--corpus", str(corpus_txt), "--encoder", str(bad), "--out", str(tmp_path / "i")],
        "lm": ["rerank", "--candidates", str(candidates), "--out", str(tmp_path / "r"), "--lm", str(bad),
               "--cache-dir", str(tmp_path / "c")],
        "icl lm": ["icl", "--data", str(candidates), "--out", str(tmp_path / "icl"), "--lm", str(bad),
                   "--selection", "random", "--num-demos", "2"],
        "model": ["train", "--data", str(candidates), "--out", str(tmp_path / "t"), "--model", str(bad),
                  "--n-passages", "1", "--max-steps", "1"],
    }
    for field, argv in commands.items():
        assert main(argv) == 2, argv
        stderr = capsys.readouterr().err
        err = [line for line in stderr.splitlines() if line.startswith("error: ")]
        assert len(err) == 1 and "Traceback" not in stderr, (argv, stderr)
        assert str(bad) in err[0] and f"field '{field.split()[-1]}'" in err[0], (argv, err)
        if kind == "missing folder":
            assert "no such folder" in err[0]
