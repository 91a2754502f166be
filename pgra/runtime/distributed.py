"""Process-group helper for stages that split work across ranks (torchrun or accelerate launch).

Tensor collectives run on nccl (a GPU per rank) or gloo; pgra's own exchanges run over a gloo group of their
own with a longer wait (``PGRA_DIST_WAIT_S``). docs/beyond-one-machine.md."""

from __future__ import annotations

import math
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..core.errors import InputError, shorten, whole_number
from . import device
from .device import apply_launcher_threads, local_device_index, ranks_per_node, warn_if_cuda_missing

TIMEOUT_ENV = "PGRA_DIST_TIMEOUT_S"  # the main process group's timeout (its tensor collectives)
WAIT_ENV = "PGRA_DIST_WAIT_S"  # how long a rank waits for the others in pgra's own exchanges (the gloo group)
DEFAULT_TIMEOUT_S = 120 * 60.0
DEFAULT_WAIT_S = 7 * 24 * 3600.0

_exchanges = None  # the gloo group of pgra's own exchanges, once init_distributed made one
_stage: tuple[DistContext | None] | None = None  # this rank's stage_context, once made


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    group: Any = field(default=None, compare=False, repr=False)  # a part of the ranks (stage_context); None: all

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def exchanges(self) -> Any:
        """The gloo group its exchanges run over: its own part's, else pgra's group of all ranks."""
        return _exchanges if self.group is None else self.group

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier(group=self.exchanges)

    def shard(self, n_items: int) -> range:
        """The items ``i`` with ``i % world_size == rank`` (round-robin keeps shards balanced)."""
        return range(self.rank, n_items, self.world_size)


def choose_backend() -> tuple[str, str | None]:
    """The process group's backend and why it is gloo with GPUs visible (no CUDA, or more ranks than GPUs)."""
    if not torch.cuda.is_available():
        return "gloo", None
    gpus, ranks = torch.cuda.device_count(), ranks_per_node()
    if ranks is not None and ranks > gpus:
        return "gloo", (f"{ranks} ranks on this node share {gpus} GPU(s) (rank i uses GPU LOCAL_RANK % {gpus}); "
                        "NCCL refuses two ranks on one GPU, so the ranks exchange their data over gloo")
    return "nccl", None


def gloo_interface_problem(env: Mapping[str, str] | None = None, resolve=None) -> str | None:
    """Why gloo cannot connect this launch's nodes (hostname on loopback, no ``GLOO_SOCKET_IFNAME``), or None."""
    env = os.environ if env is None else env
    if env.get("GLOO_SOCKET_IFNAME", "").strip():
        return None
    world, local = whole_number(env.get("WORLD_SIZE") or 1) or 1, ranks_per_node(env)
    nodes = whole_number(env.get("SLURM_NNODES") or 1) or 1
    if not ((local is not None and world > local) or (local is None and nodes > 1)):
        return None
    host = socket.gethostname()
    try:
        address = (resolve or socket.gethostbyname)(host)
    except OSError:
        address = None
    if address is not None and not address.startswith("127."):
        return None
    where = f"resolves to {address} (loopback)" if address else "does not resolve"
    return (f"this job's ranks span several nodes and this host's name {host} {where}: gloo (pgra's exchanges) "
            "would listen where the other nodes cannot reach it; set GLOO_SOCKET_IFNAME to the network interface "
            "the nodes share (e.g. GLOO_SOCKET_IFNAME=eth0; `ip -br addr` lists them), docs/beyond-one-machine.md")


def seconds_from_env(name: str, default: float, env: Mapping[str, str] | None = None) -> float:
    """Seconds > 0 from the environment variable ``name`` (``default`` when unset); else an InputError naming it."""
    value = (os.environ if env is None else env).get(name, "").strip()
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not math.isfinite(seconds) or seconds <= 0:
        raise InputError(f"must be a positive number of seconds, not {shorten(value)}", field=name)
    return seconds


def dist_timeouts(env: Mapping[str, str] | None = None) -> tuple[timedelta, timedelta]:
    """The main group's timeout (``PGRA_DIST_TIMEOUT_S``) and pgra's own exchanges' wait (``PGRA_DIST_WAIT_S``)."""
    return (timedelta(seconds=seconds_from_env(TIMEOUT_ENV, DEFAULT_TIMEOUT_S, env)),
            timedelta(seconds=seconds_from_env(WAIT_ENV, DEFAULT_WAIT_S, env)))


def init_distributed() -> DistContext:
    """Join the launcher's process group, if any, and make the gloo group of pgra's own exchanges."""
    global _exchanges
    if not dist.is_initialized():
        apply_launcher_threads()
        warn_if_cuda_missing()
    world = whole_number(os.environ.get("WORLD_SIZE", "")) or 1
    if world <= 1:
        return DistContext()
    if not dist.is_initialized():
        timeout, wait = dist_timeouts()  # a bad value is refused before the ranks meet
        backend, why = choose_backend()
        if torch.cuda.is_available():
            torch.cuda.set_device(local_device_index())
        first = not whole_number(os.environ.get("LOCAL_RANK") or 0)
        if why and first:
            print(f"note: {why}", file=sys.stderr, flush=True)
        unreachable = gloo_interface_problem()
        if unreachable and first:
            print(f"warning: {unreachable}", file=sys.stderr, flush=True)
        dist.init_process_group(backend=backend, timeout=timeout)
        _exchanges = dist.new_group(backend="gloo", timeout=wait)
    return DistContext(rank=dist.get_rank(), world_size=dist.get_world_size())


def stage_context(ctx: DistContext) -> DistContext | None:
    """The ranks of ``ctx`` doing a stage's work, one per GPU (None: this rank sits out); all of ``ctx`` call it."""
    global _stage
    if ctx.world_size == 1 or ctx.group is not None:
        return ctx
    if _stage is None:
        works = gather_objects(ctx, not device.shares_a_gpu())
        ranks = [r for r, w in enumerate(works) if w]
        if len(ranks) == ctx.world_size or 0 not in ranks:
            _stage = (ctx,)
        else:
            group = dist.new_group(ranks=ranks, backend="gloo", timeout=dist_timeouts()[1])
            _stage = (DistContext(ranks.index(ctx.rank), len(ranks), group) if ctx.rank in ranks else None,)
    return _stage[0]


def shutdown_distributed() -> None:
    """Leave the process group (if this process joined one)."""
    global _exchanges, _stage
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _exchanges, _stage = None, None


def gather_objects(ctx: DistContext, obj):
    """Every rank's ``obj`` as a list (rank order); a single process gets ``[obj]``."""
    if ctx.world_size == 1:
        return [obj]
    out = [None] * ctx.world_size
    dist.all_gather_object(out, obj, group=ctx.exchanges)
    return out


def main_computes(ctx: DistContext, compute):
    """``compute()`` on the main process only, its result sent to every rank (a failure raised on all)."""
    if ctx.world_size == 1:
        return compute()
    box: list = [None]
    if ctx.is_main:
        try:
            box = [(True, compute())]
        except Exception as e:
            dist.broadcast_object_list([(False, f"{type(e).__name__}: {e}")], src=0, group=ctx.exchanges)
            raise
    dist.broadcast_object_list(box, src=0, group=ctx.exchanges)  # (global rank 0 is the main one of every part)
    ok, value = box[0]
    if not ok:
        raise RuntimeError(f"the main process failed: {value}")
    return value
