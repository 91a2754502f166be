"""`pgra export --push-to-hub REPO`: the exported folder is uploaded with huggingface_hub (a fake HfApi here: no
network), only with the flag, and a missing package, token or bad repository id is one `error:` line before
anything is written.

The export itself is replaced by a function writing a small folder (tests/test_export.py tests the real one on a
trained run): what is tested here is what the command does with the folder it wrote."""

from __future__ import annotations

import sys
from pathlib import Path

import huggingface_hub
import pytest

import pgra.serving.export
from pgra.cli import main
from tests.conftest import one_error_line

FILES = {"export.json": "{}", "README.md": "---\nlibrary_name: pgra\n---\n", "best/model.safetensors": "weights"}


class FakeApi:
    """Records what pgra asks of the Hub, and the uploaded folder's files (read while uploading)."""

    made: list[FakeApi] = []
    fail = False

    def __init__(self, token=None):
        self.token, self.calls = token, []
        FakeApi.made.append(self)

    def create_repo(self, repo_id, **kw):
        self.calls.append(("create_repo", repo_id, kw))
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(self, *, repo_id, folder_path, **kw):
        if FakeApi.fail:
            raise ConnectionError("403 Forbidden: no write access\nmore detail")  # HfHubHTTPError is an OSError
        root = Path(folder_path)
        names = [str(p.relative_to(root)) for p in sorted(root.rglob("*")) if p.is_file()]
        kept = huggingface_hub.utils.filter_repo_objects(names, ignore_patterns=kw.get("ignore_patterns"))
        files = {name: _text_or_bytes(root / name) for name in kept}  # what huggingface_hub would upload
        self.calls.append(("upload_folder", repo_id, {**kw, "files": files}))


def _text_or_bytes(path: Path) -> str | bytes:
    """A file's text, or its bytes where it is binary (the export's wheel)."""
    try:
        return path.read_text()
    except UnicodeDecodeError:
        return path.read_bytes()


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """A fake HfApi with a token; ``export_run`` writes FILES (and counts its calls)."""
    FakeApi.made, FakeApi.fail = [], False
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_test_token")
    exports = []

    def fake_export(run, out, copy_index=False, copy_lm=False):
        exports.append(out)
        for name, text in FILES.items():
            (Path(out) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(out) / name).write_text(text)
        return Path(out)

    monkeypatch.setattr(pgra.serving.export, "export_run", fake_export)
    (tmp_path / "run").mkdir()
    return exports


def _argv(tmp_path, *extra):
    return ["export", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "out"), *extra]


def test_push_uploads_the_exported_folder(hub, tmp_path, capsys):
    assert main(_argv(tmp_path, "--push-to-hub", "alice/mr-pgra", "--private")) == 0
    (api,) = FakeApi.made
    assert api.token == "hf_test_token"
    (create, upload) = api.calls
    assert create == ("create_repo", "alice/mr-pgra", {"repo_type": "model", "private": True, "exist_ok": True})
    assert upload[:2] == ("upload_folder", "alice/mr-pgra") and upload[2]["repo_type"] == "model"
    assert upload[2]["files"] == FILES
    assert "https://huggingface.co/alice/mr-pgra" in capsys.readouterr().out

    assert main(_argv(tmp_path, "--push-to-hub", "alice/mr-pgra")) == 0  # public: private=False
    assert FakeApi.made[-1].calls[0][2]["private"] is False


def test_no_upload_without_the_flag(hub, tmp_path):
    assert main(_argv(tmp_path)) == 0
    assert hub and FakeApi.made == []  # exported, the Hub never touched


@pytest.mark.parametrize("case, says", [
    ("no-token", "no Hugging Face token: set HF_TOKEN"),
    ("no-package", "needs huggingface_hub: pip install huggingface_hub"),
    ("bad-repo", "is not a Hub repository id"),
    ("private-alone", "--private applies to --push-to-hub"),
])
def test_refused_before_anything_is_written(hub, tmp_path, capsys, monkeypatch, case, says):
    repo = "alice/mr-pgra"
    if case == "no-token":
        monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    elif case == "no-package":
        monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import huggingface_hub raises ImportError
    elif case == "bad-repo":
        repo = "alice/bad name/x"
    extra = ["--private"] if case == "private-alone" else ["--push-to-hub", repo]
    line = one_error_line(_argv(tmp_path, *extra), capsys)
    assert says in line and ("field 'push_to_hub'" in line or case == "private-alone"), line
    assert hub == [] and not (tmp_path / "out").exists() and FakeApi.made == []


def test_a_failed_upload_keeps_the_folder(hub, tmp_path, capsys):
    FakeApi.fail = True
    line = one_error_line(_argv(tmp_path, "--push-to-hub", "alice/mr-pgra"), capsys)
    assert "403 Forbidden: no write access" in line and "folder is kept" in line and "more detail" not in line
    assert (tmp_path / "out" / "best" / "model.safetensors").read_text() == "weights"



def test_a_link_in_the_folder_is_never_uploaded(hub, tmp_path, capsys, monkeypatch):
    """Finding 1: a link out of the exported folder (to the Hub token) is refused by name; nothing is uploaded."""
    secret = tmp_path / "token"
    secret.write_text("hf_secret")
    fake_export = pgra.serving.export.export_run

    def planted(run, out, copy_index=False, copy_lm=False):
        fake_export(run, out)
        (Path(out) / "best" / "tokenizer.json").symlink_to(secret)
        return Path(out)

    monkeypatch.setattr(pgra.serving.export, "export_run", planted)
    line = one_error_line(_argv(tmp_path, "--push-to-hub", "alice/mr-pgra"), capsys)
    assert "best/tokenizer.json is a symbolic link to" in line and "field 'push_to_hub'" in line, line
    assert FakeApi.made[0].calls == []  # neither created nor uploaded


def test_a_failed_upload_is_retried_by_the_same_export(tmp_path, capsys, monkeypatch):
    """Finding 2: the failed upload's advice works: the same `pgra export --push-to-hub` replaces its own folder
    and uploads it (before: refused, the folder "holds a 'reader' artifact")."""
    from tests.test_export import fake_run

    FakeApi.made, FakeApi.fail = [], True
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_test_token")
    run = fake_run(tmp_path / "exp")
    argv = ["export", "--run", str(run), "--out", str(tmp_path / "out"), "--push-to-hub", "alice/mr-pgra"]
    assert "re-run the same `pgra export`" in one_error_line(argv, capsys)
    FakeApi.fail = False
    assert main(argv) == 0
    uploaded = FakeApi.made[-1].calls[-1][2]["files"]
    assert set(uploaded) == {"best/model.safetensors", "best/fid_config.json", "metrics.json", "README.md",
                             "manifest.json", "export.json", f"wheel/pgra-{pgra.__version__}-py3-none-any.whl"}
