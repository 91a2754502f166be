"""Process-group helper for stages that split work across ranks (torchrun or accelerate launch).

Works the same on CPU (gloo) and GPU (nccl); a single process needs no process group at all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()

    def shard(self, n_items: int) -> range:
        """The items ``i`` with ``i % world_size == rank`` (round-robin keeps shards balanced)."""
        return range(self.rank, n_items, self.world_size)


def init_distributed(timeout_minutes: int = 120) -> DistContext:
    """Join the process group announced by the launcher's environment, if any."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext()
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group(backend=backend, timeout=timedelta(minutes=timeout_minutes))
    return DistContext(rank=dist.get_rank(), world_size=dist.get_world_size())


def shutdown_distributed() -> None:
    """Leave the process group (if this process joined one)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def gather_objects(ctx: DistContext, obj):
    """Every rank's ``obj`` as a list (rank order); a single process gets ``[obj]``."""
    if ctx.world_size == 1:
        return [obj]
    out = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def main_computes(ctx: DistContext, compute):
    """``compute()`` run on the main process only, its result sent to every rank (one writer for shared caches).
    If it raises, the main process re-raises and the other ranks raise a ``RuntimeError`` naming the failure."""
    if ctx.world_size == 1:
        return compute()
    box: list = [None]
    if ctx.is_main:
        try:
            box = [(True, compute())]
        except Exception as e:
            dist.broadcast_object_list([(False, f"{type(e).__name__}: {e}")], src=0)
            raise
    dist.broadcast_object_list(box, src=0)
    ok, value = box[0]
    if not ok:
        raise RuntimeError(f"the main process failed: {value}")
    return value
