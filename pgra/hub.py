"""``pgra export --push-to-hub REPO``: upload an exported folder to the Hugging Face Hub as a model repository.

:func:`hub_client` runs before anything is written (huggingface_hub installed, the repository id well formed, a
token found the way huggingface_hub finds it: ``HF_TOKEN`` or ``hf auth login``); :func:`push_to_hub` then creates
the repository (an existing one is kept) and uploads the folder in one commit. A failed upload keeps the folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import InputError

FIELD = "push_to_hub"
BOOKKEEPING = [".pgra-*", "*/.pgra-*"]  # pgra's lock and ownership records: not part of the model


def hub_client(repo: str) -> Any:
    """An ``HfApi`` holding the user's token, or an InputError naming what is missing (the package, the token,
    a well-formed repository id)."""
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
    token = huggingface_hub.get_token()
    if not token:
        raise InputError("no Hugging Face token: set HF_TOKEN or run `hf auth login` (a token with write access)",
                         field=FIELD)
    return huggingface_hub.HfApi(token=token)


def push_to_hub(folder: str | Path, repo: str, private: bool = False, api: Any = None) -> str:
    """Upload ``folder`` (an export) to the model repository ``repo``, created when missing (``private`` then
    sets its visibility); returns the repository's URL. ``api``: an ``HfApi`` (else :func:`hub_client`)."""
    api = api if api is not None else hub_client(repo)
    folder = Path(folder)
    try:
        url = api.create_repo(repo, repo_type="model", private=private, exist_ok=True)
        api.upload_folder(repo_id=repo, folder_path=str(folder), repo_type="model",
                          ignore_patterns=BOOKKEEPING, commit_message=f"pgra export of {folder.name}")
    except Exception as e:  # HTTP (401, 403, 404), network: one line; the exported folder stays
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise InputError(f"uploading {folder} to the Hub repository {repo!r} failed ({first[:300]}); the exported "
                         "folder is kept: re-run with --push-to-hub to retry", field=FIELD) from None
    return str(url)
