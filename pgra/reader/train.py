"""Train and evaluate the FiD reader with accelerate (one CPU, one GPU, DDP or DeepSpeed).

``accelerate launch scripts/train.py --config configs/...yaml`` (or ``torchrun``, or plain ``python``).
Global batch = ``batch_size`` whatever the number of processes (accelerate's split_batches). Resumable:
every ``save_every`` steps the full state (weights as safetensors, optimizer, scheduler, RNG) is saved with
``trainer_state.json``; a re-run continues from the latest checkpoint, skipping the batches already seen, and
reaches the same weights as an uninterrupted run.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler
from tqdm.auto import tqdm

from ..artifacts import (
    MANIFEST,
    atomic_dir,
    read_json,
    sha256_file,
    write_json,
    write_manifest,
)
from ..config import from_dict, to_dict
from ..errors import InputError
from ..evaluation.metrics import compute_metric
from ..interchange import read_records, write_records
from ..tasks import TaskSpec, get_task
from .config import TrainConfig
from .data import ReaderFormatter
from .fid import FiDReader, load_tokenizer


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


def _load(data_dir: Path, split: str, task: TaskSpec, limit: int = 0) -> list[dict[str, Any]]:
    path = data_dir / f"{split}.jsonl"
    records = list(read_records(path, labels=task.labels))
    return records[:limit] if limit else records


def _task(cfg: TrainConfig, manifest: dict[str, Any]) -> TaskSpec:
    recorded = from_dict(TaskSpec, manifest["task"], source=f"{cfg.data}/{MANIFEST}")
    if cfg.task and get_task(cfg.task).name != recorded.name:
        raise InputError(f"{cfg.data} holds data of task '{recorded.name}', not '{cfg.task}'", field="task")
    return get_task(cfg.task) if cfg.task else recorded


def predict(reader: FiDReader, fmt: ReaderFormatter, records: list[dict[str, Any]], batch_size: int,
            mode: str, accelerator=None) -> list[str | None]:
    """Predicted labels (None where generation names no label word) in record order."""
    device = next(reader.parameters()).device
    preds: list[str | None] = []
    reader.eval()
    for start in range(0, len(records), batch_size):
        batch = fmt.collate(records[start:start + batch_size])
        ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
        ctx = accelerator.autocast() if accelerator is not None else torch.autocast("cpu", enabled=False)
        with ctx:
            if mode == "scoring":
                scores = reader.score_targets(ids, mask, fmt.target_tensor.to(device), fmt.target_mask.to(device))
                preds += [fmt.task.labels[i] for i in scores.argmax(-1).tolist()]
            elif mode == "generate":
                out = reader.generate(ids, mask, max_new_tokens=max(len(t) for t in fmt.targets))
                preds += [fmt.word_of(t) for t in fmt.tok.batch_decode(out, skip_special_tokens=False)]
            else:
                raise InputError(f"unknown predict_mode '{mode}' (scoring, generate)", field="predict_mode")
    return preds


def evaluate(reader: FiDReader, fmt: ReaderFormatter, records: list[dict[str, Any]], batch_size: int, mode: str,
             accelerator=None) -> tuple[float, list[str | None]]:
    preds = predict(reader, fmt, records, batch_size, mode, accelerator)
    gold = [str(r["label"]) for r in records]
    safe = [p if p is not None else "<invalid>" for p in preds]
    return compute_metric(fmt.task.metric, gold, safe, fmt.task.labels), preds


def _latest_checkpoint(out: Path) -> Path | None:
    ckpts = sorted((out / "checkpoints").glob("step_*"), key=lambda p: int(p.name.split("_")[1]))
    ckpts = [c for c in ckpts if (c / "trainer_state.json").exists()]
    return ckpts[-1] if ckpts else None


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Train, select the best checkpoint on dev, evaluate it on test; returns the metrics."""
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, set_seed
    from transformers import get_linear_schedule_with_warmup

    if not cfg.data or not cfg.out:
        raise InputError("train needs data and out", field="data" if not cfg.data else "out")
    data_dir, out = Path(cfg.data), Path(cfg.out)
    if not (data_dir / MANIFEST).exists():
        raise InputError(f"{data_dir} has no {MANIFEST}: not a finished `pgra rerank` or `pgra retrieve` folder",
                         field="data")
    manifest = read_json(data_dir / MANIFEST)
    if manifest.get("kind") not in ("reranked", "candidates"):
        raise InputError(f"{data_dir} holds a '{manifest.get('kind')}' artifact; train needs a `pgra rerank` or "
                         "`pgra retrieve` folder", field="data")
    task = _task(cfg, manifest)
    if cfg.log_with == "wandb":
        os.environ.setdefault("WANDB_MODE", "offline")
    # cpu=True when there is no GPU: accelerate only joins a torchrun/gloo process group on CPU when told so
    # (not under `accelerate launch` with a DeepSpeed config, which brings its own CPU accelerator)
    use_deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"
    from accelerate.utils import DistributedDataParallelKwargs

    acc = Accelerator(cpu=not torch.cuda.is_available() and not use_deepspeed, mixed_precision=cfg.mixed_precision,
                      kwargs_handlers=[DistributedDataParallelKwargs(
                          find_unused_parameters=cfg.find_unused_parameters)], gradient_accumulation_steps=cfg.grad_accum,
                      log_with=None if cfg.log_with == "none" else cfg.log_with, project_dir=str(out),
                      dataloader_config=DataLoaderConfiguration(split_batches=True))
    if cfg.batch_size % acc.num_processes:
        raise InputError(f"batch_size {cfg.batch_size} must be divisible by the {acc.num_processes} processes",
                         field="batch_size")
    set_seed(cfg.seed)
    train_records = _load(data_dir, "train", task, cfg.max_train_examples)
    dev_records = _load(data_dir, "dev", task, cfg.max_eval_examples)
    tokenizer = load_tokenizer(cfg.model)
    reader = FiDReader.from_pretrained(cfg.model)
    if cfg.gradient_checkpointing:
        enable = getattr(reader.model, "activation_checkpointing_enable", None) or \
            reader.model.gradient_checkpointing_enable  # transformers 5.x name, then 4.x
        enable()
    fmt = ReaderFormatter(task, tokenizer, cfg.n_passages, cfg.max_length, cfg.input_format)
    from ..tasks import check_label_words

    for w in check_label_words(task, tokenizer):
        acc.print(f"warning: {w}")

    sampler = EpochSampler(len(train_records), cfg.seed)
    train_dl = DataLoader(train_records, batch_size=cfg.batch_size, sampler=sampler, collate_fn=fmt.collate,
                          drop_last=True)
    if len(train_dl) == 0:
        raise InputError(f"{len(train_records)} training examples, fewer than one batch of {cfg.batch_size}",
                         field="batch_size")
    no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight", "layernorm.weight")
    groups = [{"params": [p for n, p in reader.named_parameters() if not any(k in n for k in no_decay)],
               "weight_decay": cfg.weight_decay},
              {"params": [p for n, p in reader.named_parameters() if any(k in n for k in no_decay)],
               "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=cfg.learning_rate)
    scheduler = get_linear_schedule_with_warmup(optimizer, cfg.warmup_steps, cfg.max_steps)
    reader, optimizer, train_dl, scheduler = acc.prepare(reader, optimizer, train_dl, scheduler)

    state = {"step": 0, "best_metric": -math.inf, "best_step": 0, "evals_without_improvement": 0, "history": []}
    resume_key = {**_resume_key(cfg), "data_sha256": {s: sha256_file(data_dir / f"{s}.jsonl")
                                                       for s in ("train", "dev")}}
    ckpt = _latest_checkpoint(out)
    if ckpt is not None:
        saved = read_json(ckpt / "trainer_state.json")
        if saved.get("config") != resume_key:
            raise InputError(f"{ckpt} was written with another config or other data; use another --out or "
                             "delete it", field="out")
        acc.load_state(str(ckpt))
        state = saved["state"]
        acc.print(f"resuming from {ckpt} (step {state['step']})")
    if acc.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        (out / MANIFEST).unlink(missing_ok=True)
    if cfg.log_with != "none":
        acc.init_trackers("pgra", config={k: v for k, v in asdict(cfg).items() if isinstance(v, (int, float, str))})
    save_every = cfg.save_every or cfg.eval_every or cfg.max_steps
    log_path = out / "train_log.jsonl"
    bar = tqdm(total=cfg.max_steps, initial=state["step"], desc="training", disable=not (cfg.show_progress and
                                                                                        acc.is_main_process))
    stop = False
    while state["step"] < cfg.max_steps and not stop:
        consumed = state["step"] * cfg.grad_accum
        epoch, offset = divmod(consumed, len(train_dl))
        loader = acc.skip_first_batches(train_dl, offset) if offset else train_dl
        # accelerate's loaders re-seed the sampler with their own epoch counter on every __iter__: set both
        for obj in (sampler, loader):
            if hasattr(obj, "set_epoch"):
                obj.set_epoch(epoch)
        reader.train()
        for batch in loader:
            with acc.accumulate(reader):
                loss = reader(batch["input_ids"], batch["attention_mask"], labels=batch["labels"]).loss
                acc.backward(loss)
                if acc.sync_gradients and cfg.max_grad_norm > 0:
                    acc.clip_grad_norm_(reader.parameters(), cfg.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if not acc.sync_gradients:
                continue
            state["step"] += 1
            step = state["step"]
            mean_loss = acc.gather(loss.detach().float().reshape(1)).mean().item()
            bar.update(1)
            bar.set_postfix(loss=f"{mean_loss:.4f}")
            record = {"step": step, "loss": mean_loss, "lr": scheduler.get_last_lr()[0]}
            if cfg.eval_every and step % cfg.eval_every == 0:
                metric, _ = evaluate(acc.unwrap_model(reader), fmt, dev_records, cfg.eval_batch_size,
                                     cfg.predict_mode, acc)
                reader.train()
                record[f"dev_{task.metric}"] = metric
                if metric > state["best_metric"]:
                    state.update(best_metric=metric, best_step=step, evals_without_improvement=0)
                    _save_model(acc, reader, tokenizer, out / "best", cfg, task, step)
                else:
                    state["evals_without_improvement"] += 1
                    if cfg.early_stopping_patience and \
                            state["evals_without_improvement"] >= cfg.early_stopping_patience:
                        stop = True
            state["history"].append(record)
            if acc.is_main_process:
                with open(log_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(record) + "\n")
            if cfg.log_with != "none":
                acc.log(record, step=step)
            if step % save_every == 0 or step >= cfg.max_steps or stop:
                _checkpoint(acc, out, state, cfg, resume_key)
            if step >= cfg.max_steps or stop:
                break
    bar.close()
    acc.wait_for_everyone()
    if not (out / "best").exists():  # no evaluation ran: the final weights are the model
        _save_model(acc, reader, tokenizer, out / "best", cfg, task, state["step"])
    results: dict[str, Any] = {}
    if use_deepspeed:  # the final evaluation loads `best/` as a plain model, not partitioned by ZeRO-3
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()
    if acc.is_main_process:
        best = FiDReader.from_pretrained(str(out / "best")).to(acc.device)
        for split in ("dev", cfg.test_split):
            if not (data_dir / f"{split}.jsonl").exists():
                continue
            records = _load(data_dir, split, task)
            metric, preds = evaluate(best, fmt, records, cfg.eval_batch_size, cfg.predict_mode, acc)
            results[split] = {task.metric: metric, "examples": len(records),
                              "invalid_predictions": sum(p is None for p in preds)}
            write_records(out / f"predictions_{split}.jsonl",
                          ({"id": r["id"], "label": r["label"], "prediction": p} for r, p in
                           zip(records, preds, strict=True)))
        write_json(out / "metrics.json", {"task": task.name, "metric": task.metric, "best_step": state["best_step"],
                                          "results": results})
        write_manifest(out, {"kind": "reader", "task": to_dict(task), "model": cfg.model,
                             "data": str(data_dir.resolve()), "data_kind": manifest["kind"], "steps": state["step"],
                             "best_step": state["best_step"], "results": results, "config": asdict(cfg)})
    if cfg.log_with != "none":
        acc.end_training()
    return results


def _resume_key(cfg: TrainConfig) -> dict[str, Any]:
    """The settings a checkpoint must share to be resumed (everything but logging and progress)."""
    return {k: v for k, v in asdict(cfg).items() if k not in ("show_progress", "log_with", "keep_checkpoints")}


def _save_model(acc, reader, tokenizer, directory: Path, cfg: TrainConfig, task: TaskSpec, step: int) -> None:
    """Save the reader as a plain ``save_pretrained`` folder; every process calls this (ZeRO-3 gathers)."""
    state_dict = acc.get_state_dict(reader)
    if acc.is_main_process:
        inner = {k.removeprefix("model."): v for k, v in state_dict.items()}
        with atomic_dir(directory) as tmp:
            acc.unwrap_model(reader).save_pretrained(
                tmp, tokenizer, {"task": task.name, "n_passages": cfg.n_passages, "input_format": cfg.input_format,
                                 "max_length": cfg.max_length, "step": step}, state_dict=inner)
    acc.wait_for_everyone()


def _checkpoint(acc, out: Path, state: dict[str, Any], cfg: TrainConfig, resume_key: dict[str, Any]) -> None:
    directory = out / "checkpoints" / f"step_{state['step']}"
    acc.save_state(str(directory), safe_serialization=True)
    if acc.is_main_process:
        write_json(directory / "trainer_state.json", {"state": state, "config": resume_key})
        ckpts = sorted((out / "checkpoints").glob("step_*"), key=lambda p: int(p.name.split("_")[1]))
        for old in ckpts[: -cfg.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
    acc.wait_for_everyone()
