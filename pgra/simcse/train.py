"""Train an unsupervised SimCSE encoder on a corpus with accelerate (CPU, DDP, mixed precision).

Two dropout views of each sentence are a positive pair, the rest of the global batch the negatives (InfoNCE,
gathered across processes); ``.simcse/`` holds the corpus store and checkpoints, and a re-run resumes."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from ..core.config import check_config
from ..core.errors import InputError
from ..core.faults import fault_point
from ..core.progress import progress
from ..data.corpus import CorpusStore, build_store
from ..lm.loading import load_pretrained
from ..lm.tokens import pad_sequences
from ..runtime.training import (
    EpochSampler,
    adamw_with_schedule,
    resume_settings,
    resume_state,
    save_checkpoint,
)
from ..storage.artifacts import (
    MANIFEST,
    apply_umask,
    model_fingerprint,
    read_json,
    write_json,
    write_manifest,
    write_text,
)
from ..storage.lock import locks_output
from .config import SimCSEConfig
from .geometry import alignment, uniformity
from .model import SimCSEModel, contrastive_loss, gather_with_grad

KIND = "simcse"
STATE_DIR = ".simcse"
HEAD_FILE = "simcse_head.safetensors"


class Collate:
    """Corpus positions -> padded ``input_ids`` / ``attention_mask`` (truncated to ``max_length``)."""

    def __init__(self, store: CorpusStore, tokenizer, max_length: int) -> None:
        self.store, self.tokenizer, self.max_length = store, tokenizer, max_length
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def __call__(self, positions: list[int]) -> dict[str, torch.Tensor]:
        ids = self.tokenizer(self.store.texts(positions), truncation=True, max_length=self.max_length)["input_ids"]
        input_ids, mask = pad_sequences(ids, self.pad_id)
        return {"input_ids": input_ids, "attention_mask": mask}


@torch.no_grad()
def geometry(model: SimCSEModel, collate: Collate, positions: list[int], batch_size: int, seed: int,
             device: torch.device) -> dict[str, float]:
    """Alignment and uniformity of the ``cls_before_pooler`` unit vectors, dropout seeded without touching the RNG."""
    was_training = model.training
    model.train()
    views: list[list[torch.Tensor]] = [[], []]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for start in range(0, len(positions), batch_size):
            batch = {k: v.to(device) for k, v in collate(positions[start:start + batch_size]).items()}
            for view in views:
                view.append(torch.nn.functional.normalize(model.cls(**batch).float(), dim=-1).cpu())
    model.train(was_training)
    x, y = torch.cat(views[0]), torch.cat(views[1])
    return {"alignment": alignment(x, y), "uniformity": uniformity(x), "sentences": len(positions)}


@dataclass
class SimCSESetup:
    """Everything the loop works on, built by :func:`setup`."""

    cfg: SimCSEConfig
    acc: Any  # accelerate.Accelerator
    out: Path
    state_dir: Path
    store: CorpusStore
    tokenizer: Any
    collate: Collate
    heldout: list[int]
    model: Any  # the prepared (possibly DDP-wrapped) SimCSEModel
    optimizer: Any
    scheduler: Any
    sampler: EpochSampler
    train_dl: Any
    state: dict[str, Any]
    resume_key: dict[str, Any]


def _accelerator(cfg: SimCSEConfig):
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration

    # cpu=True without a GPU: accelerate then joins a torchrun/gloo process group on CPU (see pgra.reader.train)
    return Accelerator(cpu=not torch.cuda.is_available(), mixed_precision=cfg.mixed_precision,
                       dataloader_config=DataLoaderConfiguration(split_batches=True))


def _load_encoder(cfg: SimCSEConfig):
    from transformers import AutoModel, AutoTokenizer

    tokenizer = load_pretrained(AutoTokenizer, cfg.encoder, "encoder's tokenizer", "encoder")
    # fp32 master weights whatever the checkpoint's dtype (transformers 5 keeps a fp16/bf16 checkpoint's dtype,
    # which the fp32 MLP head cannot take); --mixed-precision runs the compute in bf16/fp16
    encoder = load_pretrained(AutoModel, cfg.encoder, "encoder", "encoder", dtype=torch.float32)
    if cfg.dropout >= 0:  # attention dropout reads its module's p too (transformers' attention functions)
        for m in encoder.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = cfg.dropout
    return tokenizer, encoder


def setup(cfg: SimCSEConfig) -> SimCSESetup:
    """Read the corpus, split off the held-out sentences, build the model, loader and optimizer; resume."""
    check_config(cfg)
    from accelerate.utils import set_seed

    if not cfg.corpus or not cfg.out:
        raise InputError("train-simcse needs a corpus and an output folder", field="corpus" if not cfg.corpus
                         else "out")
    out = Path(cfg.out)
    state_dir = out / STATE_DIR
    acc = _accelerator(cfg)
    if cfg.batch_size % acc.num_processes:
        raise InputError(f"batch_size {cfg.batch_size} must be divisible by the {acc.num_processes} processes",
                         field="batch_size")
    src = cfg.corpus_source(split=cfg.split)
    with acc.main_process_first():  # the main process writes the store; the others then reuse it
        store = build_store(src, state_dir / "corpus", show_progress=cfg.show_progress and acc.is_main_process)
    perm = np.random.default_rng(cfg.seed).permutation(len(store))
    heldout, train_pos = sorted(perm[:cfg.heldout].tolist()), perm[cfg.heldout:].tolist()
    if len(train_pos) < cfg.batch_size:
        raise InputError(f"{len(store)} corpus sentences leave {len(train_pos)} for training after {cfg.heldout} "
                         f"held out, fewer than one batch of {cfg.batch_size}", field="batch_size")
    set_seed(cfg.seed)
    tokenizer, encoder = _load_encoder(cfg)
    model = SimCSEModel(encoder)
    collate = Collate(store, tokenizer, cfg.max_length)
    sampler = EpochSampler(len(train_pos), cfg.seed)
    train_dl = DataLoader(train_pos, batch_size=cfg.batch_size, sampler=sampler, collate_fn=collate,
                          drop_last=True)
    trains = {k: v for k, v in resume_settings(cfg).items() if k != "retrieval_eval"}  # measured after training only
    resume_key = {**trains, "corpus": store.fingerprint, "encoder": model_fingerprint(cfg.encoder)}
    before = state_dir / "geometry_before.json"
    if acc.is_main_process and not before.exists():
        write_json(before, geometry(model.to(acc.device), collate, heldout, cfg.eval_batch_size, cfg.seed,
                                    acc.device))
    optimizer, scheduler = adamw_with_schedule(model, cfg)
    model, optimizer, train_dl, scheduler = acc.prepare(model, optimizer, train_dl, scheduler)
    state: dict[str, Any] = {"step": 0, "history": []}
    state = resume_state(acc, state_dir, resume_key) or state
    if acc.is_main_process:
        (out / MANIFEST).unlink(missing_ok=True)
        if state["step"] == 0:
            (out / "train_log.jsonl").unlink(missing_ok=True)
        else:  # the log is cut back to the checkpoint: steps a killed run logged after it are trained again
            write_text(out / "train_log.jsonl", "".join(json.dumps(r) + "\n" for r in state["history"]))
    acc.wait_for_everyone()
    return SimCSESetup(cfg, acc, out, state_dir, store, tokenizer, collate, heldout, model, optimizer, scheduler,
                       sampler, train_dl, state, resume_key)


def train_loop(s: SimCSESetup, stop_after: int = 0) -> None:
    """Train to ``max_steps`` (``stop_after``: that many steps, for tests of resuming), checkpointing."""
    cfg, acc, state = s.cfg, s.acc, s.state
    save_every = cfg.save_every or cfg.max_steps
    end = min(cfg.max_steps, state["step"] + stop_after) if stop_after else cfg.max_steps
    bar = progress(total=cfg.max_steps, initial=state["step"], desc="simcse", unit="steps",
                   disable=not (cfg.show_progress and acc.is_main_process))
    s.model.train()
    while state["step"] < end:
        epoch, offset = divmod(state["step"], len(s.train_dl))
        loader = acc.skip_first_batches(s.train_dl, offset) if offset else s.train_dl
        for obj in (s.sampler, loader):  # accelerate's loaders re-seed the sampler with their own epoch counter
            if hasattr(obj, "set_epoch"):
                obj.set_epoch(epoch)
        for batch in loader:
            # dropout masks from (seed, step, process): a resumed run draws the same masks whatever else used the
            # global RNG meanwhile (a new data-loader iterator draws from it, for one)
            torch.manual_seed(int(np.random.SeedSequence([cfg.seed, state["step"], acc.process_index])
                                  .generate_state(1)[0]))
            n = len(batch["input_ids"])
            z = s.model(batch["input_ids"].repeat(2, 1), batch["attention_mask"].repeat(2, 1))
            loss = contrastive_loss(gather_with_grad(z[:n]), gather_with_grad(z[n:]), cfg.temperature)
            acc.backward(loss * acc.num_processes)  # DDP averages: times the processes = the global gradient
            s.optimizer.step()
            s.scheduler.step()
            s.optimizer.zero_grad()
            state["step"] += 1
            step, value = state["step"], loss.item()  # the same global-batch loss on every process
            bar.set_postfix(loss=f"{value:.4f}")
            bar.update(1)
            record = {"step": step, "loss": value, "lr": s.scheduler.get_last_lr()[0]}
            state["history"].append(record)
            if acc.is_main_process:
                with open(s.out / "train_log.jsonl", "a", encoding="utf-8") as f:
                    f.write(json.dumps(record) + "\n")
            fault_point("simcse.step")
            if step % save_every == 0 or step >= end:
                save_checkpoint(acc, s.state_dir, state, cfg.keep_checkpoints, s.resume_key)
            if step >= end:
                break
    bar.close()


def finish(s: SimCSESetup) -> dict[str, Any]:
    """Save the encoder and head, measure the geometry after training, write metrics and manifest; the metrics."""
    cfg, acc, out = s.cfg, s.acc, s.out
    acc.wait_for_everyone()
    metrics: dict[str, Any] = {}
    if acc.is_main_process:
        from safetensors.torch import save_file

        model: SimCSEModel = acc.unwrap_model(s.model)
        tmp = s.state_dir / "final.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        model.encoder.save_pretrained(tmp)
        s.tokenizer.save_pretrained(tmp)
        save_file({k: v.detach().cpu().contiguous() for k, v in model.mlp.state_dict().items()}, tmp / HEAD_FILE)
        apply_umask(tmp)  # safetensors writes 0600: the encoder folder gets the umask like the rest
        for f in tmp.iterdir():
            os.replace(f, out / f.name)
        tmp.rmdir()
        after = geometry(model, s.collate, s.heldout, cfg.eval_batch_size, cfg.seed, acc.device)
        metrics = {"heldout_sentences": len(s.heldout), "pooler": "cls_before_pooler",
                   "before": read_json(s.state_dir / "geometry_before.json"), "after": after}
        if cfg.retrieval_eval.groups or cfg.retrieval_eval.task:
            metrics["retrieval"] = retrieval_before_after(cfg.encoder, str(out), cfg.retrieval_eval)
        write_json(out / "metrics.json", metrics)
        history = s.state["history"]
        write_manifest(out, {
            "kind": KIND, "encoder": cfg.encoder, "encoder_fingerprint": s.resume_key["encoder"],
            "pooler": "cls_before_pooler",
            "corpus": {"source": s.store.meta["source"], "source_fingerprint": s.store.meta["source_fingerprint"],
                       "content_sha256": s.store.fingerprint, "size": len(s.store)},
            "steps": s.state["step"], "loss": history[-1]["loss"] if history else None,
            "first_loss": history[0]["loss"] if history else None, "processes": acc.num_processes,
            "geometry": {"before": metrics["before"], "after": after}, "config": asdict(cfg)})
    acc.wait_for_everyone()
    return metrics


def retrieval_before_after(start: str, trained: str, cfg) -> dict[str, list[dict[str, Any]]]:
    """Same-group recall@k (and kNN accuracy) of the start and the trained encoder under both inference poolers."""
    from .quality import measure, read_inputs

    inputs = read_inputs(cfg)
    return {when: [measure(path, pooler, cfg, inputs) for pooler in ("cls_before_pooler", "mean")]
            for when, path in (("before", start), ("after", trained))}


@locks_output(kind=KIND)
def train_simcse(cfg: SimCSEConfig) -> dict[str, Any]:
    """Train, save the encoder folder, measure alignment / uniformity; returns the metrics (main process)."""
    s = setup(cfg)
    train_loop(s)
    return finish(s)
