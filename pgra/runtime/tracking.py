"""Experiment trackers (tensorboard, wandb offline) for each experiment cell's final metrics."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..core.errors import InputError

TRACKERS = ("none", "tensorboard", "wandb")


def tracker_config(values: dict[str, Any]) -> dict[str, Any]:
    """The values both trackers accept as run config: ints, floats, strings and booleans."""
    return {k: v for k, v in values.items() if isinstance(v, (bool, int, float, str))}


def _missing(package: str) -> InputError:
    return InputError(f"log_with needs the '{package}' package: pip install {package} (pgra's tracking extra)",
                      field="log_with")


def _reinit(version: str) -> str | bool:
    """wandb's ``reinit``: always a run of our own, never one another caller left active."""
    from packaging.version import Version

    return "create_new" if Version(version) >= Version("0.19.10") else True


class Tracker:
    """One run of one tracker."""

    def __init__(self, kind: str, directory: Path, run_name: str, config: dict[str, Any]) -> None:
        self.kind = kind
        if kind == "tensorboard":
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise _missing("tensorboard") from None
            self.location = directory / "tensorboard" / run_name
            self._writer = SummaryWriter(log_dir=str(self.location))
            self._writer.add_text("config", "\n".join(f"{k}: {v}" for k, v in sorted(config.items())))
        elif kind == "wandb":
            try:
                import wandb
            except ImportError:
                raise _missing("wandb") from None
            directory.mkdir(parents=True, exist_ok=True)
            self._run = wandb.init(project="pgra", name=run_name, dir=str(directory), config=config,
                                   mode=os.environ.get("WANDB_MODE", "offline"), reinit=_reinit(wandb.__version__),
                                   settings=wandb.Settings(silent=True, console="off"))
            self.location = Path(self._run.dir).parent
        else:
            raise InputError(f"unknown tracker '{kind}', use one of {TRACKERS}", field="log_with")

    def log(self, values: dict[str, float], step: int) -> None:
        """Record scalar ``values`` at ``step``."""
        if self.kind == "tensorboard":
            for key, value in values.items():
                self._writer.add_scalar(key, value, global_step=step)
        else:
            self._run.log(dict(values), step=step)

    def close(self) -> None:
        """Flush and finish the run."""
        if self.kind == "tensorboard":
            self._writer.close()
        else:
            self._run.finish()

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_tracker(log_with: str, directory: str | Path, run_name: str, config: dict[str, Any]) -> Tracker | None:
    """A tracker run named ``run_name`` under ``directory`` (None when ``log_with`` is "none")."""
    if log_with == "none":
        return None
    return Tracker(log_with, Path(directory), run_name, tracker_config(config))


__all__ = ["TRACKERS", "Tracker", "open_tracker", "tracker_config"]
