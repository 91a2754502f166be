"""What the trainers (FiD reader, SimCSE) share: seeded sampler, AdamW with linear schedule, checkpoints."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler

from ..core.config import result_settings
from ..core.errors import IncompleteArtifactError, InputError
from ..core.faults import fault_point
from ..storage.artifacts import VERIFY_HASH_LIMIT, apply_umask, file_record, verify_files, write_json


class EpochSampler(Sampler[int]):
    """A seeded permutation per epoch (the same on every process; accelerate shards the batches)."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        return iter(np.random.default_rng([self.seed, self.epoch]).permutation(self.n).tolist())

    def __len__(self) -> int:
        return self.n


def rank_share(batch_size: int, world: int, rank: int) -> slice:
    """The contiguous part of a global batch that ``rank`` of ``world`` trains on (sizes differ by one at most)."""
    base, extra = divmod(batch_size, world)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (rank < extra))


def fp16_device_present() -> bool:
    """Whether a device here runs fp16 mixed precision (CUDA, XPU or MPS; on a CPU accelerate ignores fp16)."""
    xpu, mps = getattr(torch, "xpu", None), getattr(torch.backends, "mps", None)
    return torch.cuda.is_available() or any(d is not None and d.is_available() for d in (xpu, mps))


def check_mixed_precision(mixed_precision: str, field: str = "mixed_precision") -> None:
    """Refuse ``fp16`` mixed precision without a GPU (an InputError naming ``field``): accelerate would train in fp32
    (the weights byte for byte an fp32 run's) while the run records fp16. bf16 runs on a CPU (autocast)."""
    if mixed_precision == "fp16" and not fp16_device_present():
        raise InputError("fp16 mixed precision needs a GPU: on this machine (no CUDA, XPU or MPS device) it would "
                         "silently train in fp32 while the run records fp16; use bf16 (runs on CPU) or no",
                         field=field)


def adamw_with_schedule(model: torch.nn.Module, cfg: Any):
    """AdamW without weight decay on biases and layer norms, and the linear warm-up and decay schedule."""
    from transformers import get_linear_schedule_with_warmup

    no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight", "layernorm.weight")
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]  # not a frozen encoder
    groups = [{"params": [p for n, p in trained if not any(k in n for k in no_decay)], "weight_decay": cfg.weight_decay},
              {"params": [p for n, p in trained if any(k in n for k in no_decay)], "weight_decay": 0.0}]
    impl = getattr(cfg, "adamw_impl", "auto")
    kernels = {"foreach": {"foreach": True}, "fused": {"fused": True}}.get(impl, {})
    optimizer = torch.optim.AdamW(groups, lr=cfg.learning_rate, **kernels)
    return optimizer, get_linear_schedule_with_warmup(optimizer, cfg.warmup_steps, cfg.max_steps)


def _step(ckpt: Path) -> int:
    return int(ckpt.name.split("_")[1])


def _checkpoints(out: Path) -> list[Path]:
    """Checkpoint folders (complete or not), oldest first."""
    return sorted((out / "checkpoints").glob("step_*"), key=_step)


def _complete_checkpoints(out: Path) -> list[Path]:
    """Checkpoints whose marker (``trainer_state.json``) was written, oldest first."""
    return [c for c in _checkpoints(out) if (c / "trainer_state.json").exists()]


def read_checkpoint(ckpt: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A checkpoint's marker (None: unreadable) and what is wrong with it (None: whole)."""
    try:
        saved = json.loads((ckpt / "trainer_state.json").read_text(encoding="utf-8"))
        records = saved.get("files", {})
        int(saved["state"]["step"])  # a marker without its step is unreadable too
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return None, f"its trainer_state.json is unreadable ({type(e).__name__})"
    try:
        verify_files(ckpt, records)
    except IncompleteArtifactError as e:
        return saved, str(e).replace(f"{ckpt}/", "")
    return saved, None


def resume_state(acc, out: Path, resume_key: dict[str, Any]) -> dict[str, Any] | None:
    """Load the latest whole checkpoint under ``out/checkpoints`` into ``acc`` and return its trainer state (None:
    none); a damaged one is skipped, one of another ``resume_key`` refused."""
    for ckpt in reversed(_complete_checkpoints(out)):
        saved, damage = read_checkpoint(ckpt)
        if damage:
            acc.print(f"{ckpt}: {damage}; skipping this damaged checkpoint")
            continue
        if saved.get("config") != resume_key:
            raise InputError(f"{ckpt} was written with another config or other data; use another --out or "
                             "delete it", field="out")
        acc.load_state(str(ckpt))
        acc.print(f"resuming from {ckpt} (step {saved['state']['step']})")
        return saved["state"]
    return None


def resume_settings(cfg: Any) -> dict[str, Any]:
    """The settings a checkpoint must share to be resumed (all but the cosmetic ones: logging, progress)."""
    return result_settings(cfg)


def save_checkpoint(acc, out: Path, state: dict[str, Any], keep: int, resume_key: dict[str, Any]) -> None:
    """Save ``acc``'s state as ``out/checkpoints/step_<n>`` with its marker, keeping the ``keep`` latest."""
    directory = out / "checkpoints" / f"step_{state['step']}"
    if acc.is_main_process and directory.exists():  # a damaged one from a run that was not resumed from it
        shutil.rmtree(directory)
    acc.wait_for_everyone()
    acc.save_state(str(directory), safe_serialization=True)
    acc.wait_for_everyone()  # every rank's files are written before the marker records them
    if acc.is_main_process:
        apply_umask(directory)  # accelerate writes 0600 files: the run folder follows the user's umask
    fault_point("train.checkpoint")  # tests: killed with the state saved, before the marker that completes it
    if acc.is_main_process:
        files = {str(p.relative_to(directory)): file_record(p, hash_limit=VERIFY_HASH_LIMIT)
                 for p in sorted(directory.rglob("*")) if p.is_file()}
        write_json(directory / "trainer_state.json", {"state": state, "config": resume_key, "files": files})
        ckpts = _checkpoints(out)
        # one past this step was skipped as damaged when this run resumed: it must not outlive this one
        later = [c for c in ckpts if _step(c) > state["step"]]
        for old in later + [c for c in ckpts if c not in later][: -keep]:
            shutil.rmtree(old, ignore_errors=True)
    acc.wait_for_everyone()


def drop_resume_state(out: Path) -> None:
    """Delete a finished run's ``out/checkpoints``, renamed away first so that a killed deletion leaves nothing."""
    folder = Path(out) / "checkpoints"
    if not folder.is_dir() or folder.is_symlink():
        return
    doomed = folder.with_name(f".checkpoints.{secrets.token_hex(4)}")
    os.replace(folder, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


__all__ = ["EpochSampler", "adamw_with_schedule", "check_mixed_precision", "drop_resume_state", "fp16_device_present", "rank_share", "read_checkpoint", "resume_settings", "resume_state", "save_checkpoint"]
