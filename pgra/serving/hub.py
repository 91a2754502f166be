"""``pgra export --push-to-hub REPO``: upload an exported folder to the Hugging Face Hub (checked before anything is
written, no link out of it), and :func:`export_folder`, the way back."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core.errors import InputError, clip
from ..storage.artifacts import describe_path, write_text

FIELD = "push_to_hub"
EXPORT_FILE = "export.json"  # what makes a folder an export (pgra.serving.export's, defined here: the floor below it)
BOOKKEEPING = [".pgra-*", "*/.pgra-*"]  # pgra's lock and ownership records: not part of the model
CARD_LOAD = re.compile(r'(pgra\.Pipeline\.load\()"[^"\n]*"')  # the model card's snippet (pgra.serving.export.model_card)


def _walk(top: Path) -> Iterator[Path]:
    """``top`` and everything under it, never entering a linked folder (its link is listed)."""
    yield top
    if top.is_dir() and not top.is_symlink():
        for folder, dirs, files in os.walk(top):  # followlinks=False: a link to a folder is listed, not entered
            yield from (Path(folder) / name for name in sorted(dirs + files))


def check_no_links_out(top: str | Path, root: str | Path | None = None, field: str = FIELD) -> None:
    """Refuse a link under ``top`` that is not to a file inside ``root``, and anything not a file or folder."""
    top = Path(top)
    root = Path(root if root is not None else top).resolve()
    for path in _walk(top):
        if path.is_symlink():
            target = Path(os.path.realpath(path))
            if not (target.is_relative_to(root) and target.is_file()):
                raise InputError(f"{path} is a symbolic link to {target}, not a file inside {root}: pgra never sends "
                                 "what a link points to out of the folder it exports or uploads; nothing was "
                                 "written or uploaded: replace the link with the file itself, or remove it",
                                 field=field)
        elif path.exists() and not (path.is_file() or path.is_dir()):
            raise InputError(f"{path} is {describe_path(path)}, not a file or folder: pgra does not export or upload "
                             "it; nothing was written or uploaded: remove it", field=field)


def hub_client(repo: str) -> Any:
    """An ``HfApi`` holding the user's token, or an InputError naming what is missing."""
    try:
        import huggingface_hub
        from huggingface_hub.utils import HFValidationError, validate_repo_id
    except ImportError:
        raise InputError("--push-to-hub needs huggingface_hub: pip install huggingface_hub", field=FIELD) from None
    try:
        validate_repo_id(repo)
    except HFValidationError as e:
        raise InputError(f"{repo!r} is not a Hub repository id (USER/NAME): {str(e).splitlines()[0]}",
                         field=FIELD) from None
    if not (token := huggingface_hub.get_token()):
        raise InputError("no Hugging Face token: set HF_TOKEN or run `hf auth login` (a token with write access)",
                         field=FIELD)
    return huggingface_hub.HfApi(token=token)


def push_to_hub(folder: str | Path, repo: str, private: bool = False, api: Any = None) -> str:
    """Upload the export ``folder`` to the model repository ``repo`` (created when missing); its URL."""
    api = api if api is not None else hub_client(repo)
    folder = Path(folder)
    check_no_links_out(folder)  # a link planted in the folder after the export: never uploaded
    _name_repo_in_card(folder, repo)
    try:
        url = api.create_repo(repo, repo_type="model", private=private, exist_ok=True)
        api.upload_folder(repo_id=repo, folder_path=str(folder), repo_type="model",
                          ignore_patterns=BOOKKEEPING, commit_message=f"pgra export of {folder.name}")
    except Exception as e:  # HTTP (401, 403, 404), network: one line; the exported folder stays
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise InputError(f"uploading {folder} to the Hub repository {repo!r} failed ({first[:300]}); the exported "
                         "folder is kept: re-run the same `pgra export` (it replaces its own folder) to retry", field=FIELD) from None
    return str(url)


def _name_repo_in_card(folder: Path, repo: str) -> None:
    """The model card's snippet loads the folder by its name; uploaded, it loads the repository by its id."""
    card = folder / "README.md"
    if not card.is_file():
        return
    text = card.read_text(encoding="utf-8")
    named = CARD_LOAD.sub(lambda m: f'{m.group(1)}"{repo}"', text)
    if named != text:
        write_text(card, named)


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"} or \
        os.environ.get("PGRA_OFFLINE") == "1"


def looks_like_repo(name: str) -> bool:
    """Whether ``name``, no folder here, reads as a Hub repository id ``USER/NAME`` (not a path)."""
    if name.startswith((".", "/", "~")) or name.count("/") != 1 or Path(name).exists() or Path(name).is_symlink():
        return False
    owner, repo = name.split("/")
    return bool(owner and repo) and not Path(owner).is_dir() and \
        re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", name) is not None


def export_folder(name: str | Path, field: str = "run") -> Path:
    """The local folder of the export ``name``: itself, or a Hub repository id downloaded (or cached)."""
    if isinstance(name, Path) or not looks_like_repo(str(name)):
        return Path(name)
    repo = str(name)
    try:
        import huggingface_hub
        from huggingface_hub.utils import HFValidationError, validate_repo_id
    except ImportError:
        raise InputError(f"{repo} is no folder here; loading it from the Hugging Face Hub needs huggingface_hub: "
                         "pip install huggingface_hub", field=field) from None
    try:
        validate_repo_id(repo)
    except HFValidationError:
        return Path(name)  # not an id: the caller's own error for a missing folder
    offline = _hub_offline()
    try:
        local = huggingface_hub.snapshot_download(repo_id=repo, repo_type="model", local_files_only=offline)
    except Exception as e:  # offline and not cached, 401/404, no network: one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        how = ("the Hub is offline (HF_HUB_OFFLINE) and its cache holds no copy of it" if offline else
               f"downloading it failed ({clip(first, 300)})")
        raise InputError(f"{repo} is no folder here, and as a Hugging Face Hub repository it cannot be loaded: {how}; "
                         "give the exported folder's path, or the id of a repository `pgra export --push-to-hub` "
                         "uploaded", field=field) from None
    local = Path(local)
    if not (local / EXPORT_FILE).is_file():
        raise InputError(f"the Hugging Face Hub repository {repo} holds no {EXPORT_FILE}: not a folder `pgra export` "
                         "wrote", field=field)
    return local
