"""Train and evaluate the FiD reader with accelerate (one CPU, one GPU, DDP or DeepSpeed).

:func:`setup`, :func:`train_loop` and :func:`final_evaluation`, as in FiD's ``train_reader.py``. Each process
trains its part of the global batch weighted by its share of target tokens (the gradient is one process's), and a
resumed run reaches the same weights byte for byte (docs/stage3-reader.md)."""

from __future__ import annotations

import itertools
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from ..core.config import check_config, to_dict
from ..core.errors import InputError
from ..core.faults import fault_point
from ..core.progress import progress
from ..data.interchange import read_records, write_records
from ..rerank import stages as _builtin_stages  # noqa: F401  (registers the built-in stage families)
from ..runtime.cost import meter
from ..runtime.device import resolve_dtype
from ..runtime.training import (
    EpochSampler,
    adamw_with_schedule,
    check_mixed_precision,
    drop_resume_state,
    rank_share,
    resume_settings,
    resume_state,
    save_checkpoint,
)
from ..stages import stage_kinds
from ..storage.artifacts import (
    MANIFEST,
    atomic_dir,
    read_manifest,
    sha256_file,
    write_json,
    write_manifest,
    write_text,
)
from ..storage.lock import locks_output
from ..storage.ownership import check_folders
from ..storage.provenance import data_fields
from ..tasks import TaskSpec, check_label_words, task_from_manifest
from .config import TrainConfig
from .data import ReaderFormatter
from .encoded import EncodedInputs
from .fid import FiDReader, load_tokenizer
from .predict import Predictions, predict_records, prediction_lines, score_predictions


def batch_seed(seed: int, position: int) -> int:
    """The torch seed of the ``position``-th training batch (counted over epochs, micro-batches included)."""
    return int(np.random.SeedSequence([seed & (2**64 - 1), position]).generate_state(1, np.uint64)[0]) >> 1


def load_split(data_dir: Path, split: str, task: TaskSpec, limit: int = 0) -> list[dict[str, Any]]:
    """A split's interchange records (the first ``limit`` when given), labels checked against the task."""
    records = list(read_records(data_dir / f"{split}.jsonl", labels=task.labels))
    return records[:limit] if limit else records


def evaluate(reader: FiDReader, fmt: ReaderFormatter, records: list[dict[str, Any]], batch_size: int, mode: str,
             accelerator=None, encoded: EncodedInputs | None = None) -> tuple[float, Predictions]:
    """The task metric of ``reader`` on ``records`` and its predictions (``encoded``: stored encoder states)."""
    preds = predict_records(reader, fmt, records, batch_size, mode,
                            accelerator.autocast if accelerator is not None else None, encoded)
    return score_predictions(fmt.task, records, preds.labels), preds


@dataclass
class TrainingSetup:
    """Everything the loop and the final evaluation work on, built by :func:`setup`."""

    cfg: TrainConfig
    acc: Any  # accelerate.Accelerator
    task: TaskSpec
    data_dir: Path
    data_manifest: dict[str, Any]
    out: Path
    tokenizer: Any
    fmt: ReaderFormatter
    reader: Any  # the prepared (possibly wrapped) FiDReader
    optimizer: Any
    scheduler: Any
    sampler: EpochSampler
    train_dl: Any
    dev_records: list[dict[str, Any]]
    state: dict[str, Any]
    resume_key: dict[str, Any]
    use_deepspeed: bool
    encoded_train: EncodedInputs | None = None  # the training inputs' stored states of the frozen encoder layers
    encoded_dev: EncodedInputs | None = None
    train_records: list[dict[str, Any]] = field(default_factory=list)
    top_parameters: int = 0  # the trained top encoder layers' parameters (the cost record's, for their FLOPs)


def _accelerator(cfg: TrainConfig, use_deepspeed: bool):
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, DistributedDataParallelKwargs

    # split_batches: the scheduler steps once per optimizer step; cpu=True without a GPU: only then does accelerate
    # join a torchrun/gloo group on CPU (not under DeepSpeed, which brings its own CPU accelerator)
    return Accelerator(cpu=not torch.cuda.is_available() and not use_deepspeed, mixed_precision=cfg.mixed_precision,
                       kwargs_handlers=[DistributedDataParallelKwargs(
                           find_unused_parameters=cfg.find_unused_parameters)],
                       gradient_accumulation_steps=cfg.grad_accum,
                       log_with=None if cfg.log_with == "none" else cfg.log_with, project_dir=cfg.out,
                       dataloader_config=DataLoaderConfiguration(split_batches=True))


def deepspeed_settings(plugin: Any, cfg: TrainConfig, num_processes: int) -> dict[str, Any]:
    """Put the micro batch and ``gradient_clipping = max_grad_norm`` into the DeepSpeed config (another refused)."""
    config = plugin.deepspeed_config
    if plugin.is_auto("train_micro_batch_size_per_gpu"):
        config["train_micro_batch_size_per_gpu"] = -(-cfg.batch_size // num_processes)
    clipping = config.get("gradient_clipping", "auto")
    if clipping in ("auto", None):
        config["gradient_clipping"] = float(cfg.max_grad_norm)
        plugin.gradient_clipping = float(cfg.max_grad_norm)
    elif not isinstance(clipping, (int, float)) or isinstance(clipping, bool) or float(clipping) != cfg.max_grad_norm:
        raise InputError(f"the DeepSpeed config sets gradient_clipping {clipping!r} and the reader max_grad_norm "
                         f"{cfg.max_grad_norm:g}: set one (gradient_clipping: auto takes max_grad_norm)",
                         field="max_grad_norm")
    return config


def compile_for_training(reader: FiDReader, mode: str = "default") -> None:
    """``torch.compile`` the reader's forward; dropout keeps torch's generator, so a batch's seed fixes its masks."""
    import torch._inductor.config as inductor_config

    inductor_config.fallback_random = True
    reader.compile(mode=None if mode == "default" else mode)


def stored_top_layers(cfg: TrainConfig, reader: FiDReader) -> int | None:
    """How many top encoder layers train on the frozen ones' stored outputs (0: all frozen; None: nothing stored)."""
    n = cfg.train_top_layers
    if n is None:
        return 0 if cfg.freeze_encoder else None
    if cfg.freeze_encoder and n:
        raise InputError(f"freeze_encoder=true trains no encoder layer and train_top_layers={n} trains {n}: set "
                         "one of them (train_top_layers=0 is freeze_encoder)", field="train_top_layers")
    if n == 0:
        return 0
    from .split import encoder_split

    encoder = reader.model.get_encoder()
    layers = len(encoder_split(encoder).layers(encoder))
    if n > layers:
        raise InputError(f"the reader {cfg.model} has {layers} encoder layers; train_top_layers={n} asks for more "
                         f"(at most {layers}: every weight trained)", field="train_top_layers")
    return None if n == layers else n


def _check_test_split(data_dir: Path, split: str) -> None:
    """The split evaluated after training must be in the data folder (empty: no test evaluation)."""
    if split and not (data_dir / f"{split}.jsonl").is_file():
        present = sorted(p.stem for p in data_dir.glob("*.jsonl") if p.is_file())
        raise InputError(f"the data folder {data_dir} has no split '{split}' (it has {', '.join(present) or 'none'}); "
                         "name one of those, or pass test_split= (empty) to train without a test evaluation",
                         field="test_split")


def setup(cfg: TrainConfig) -> TrainingSetup:
    """Check the data, build the accelerator, model, loaders and optimizer, and restore a checkpoint if any."""
    check_config(cfg)
    from accelerate.utils import set_seed

    if not cfg.data or not cfg.out:
        raise InputError("train needs data and out", field="data" if not cfg.data else "out")
    if cfg.compile_mode != "default" and not cfg.compile:
        raise InputError(f"compile_mode={cfg.compile_mode} is a mode of compile, which is off: set compile=true too "
                         "(or leave compile_mode at default)", field="compile_mode")
    check_mixed_precision(cfg.mixed_precision)  # fp16 on a CPU would train in fp32, recorded as fp16
    data_dir, out = Path(cfg.data), Path(cfg.out)
    check_folders(out, ("best", "checkpoints"))  # replaced during training: a link or a file is refused now
    manifest = read_manifest(data_dir, stage_kinds())  # candidates, reranked, full_search or a plug-in stage's
    task = task_from_manifest(manifest, data_dir / MANIFEST, cfg.task)
    _check_test_split(data_dir, cfg.test_split)
    if cfg.log_with == "wandb":  # offline and inside the run folder unless the user's environment says otherwise
        os.environ.setdefault("WANDB_MODE", "offline")
        Path(cfg.out).mkdir(parents=True, exist_ok=True)
    use_deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"
    acc = _accelerator(cfg, use_deepspeed)
    set_seed(cfg.seed)
    train_records = load_split(data_dir, "train", task, cfg.max_train_examples)
    dev_records = load_split(data_dir, "dev", task, cfg.max_eval_examples)
    tokenizer = load_tokenizer(cfg.model)
    # label words the tokenizer cannot tell apart are refused before the model loads
    fmt = ReaderFormatter(task, tokenizer, cfg.n_passages, cfg.max_length, cfg.input_format,
                          cache_ids=True)  # every epoch collates the same inputs: tokenized once
    reader = FiDReader.from_pretrained(cfg.model, dtype=torch.float32)  # fp32 master weights
    if cfg.gradient_checkpointing:
        enable = getattr(reader.model, "activation_checkpointing_enable", None) or \
            reader.model.gradient_checkpointing_enable  # transformers 5.x name, then 4.x
        enable()
    top_layers = stored_top_layers(cfg, reader)
    if top_layers is not None:
        reader.freeze_encoder(top_layers)
    if cfg.compile:
        compile_for_training(reader, cfg.compile_mode)
    for w in check_label_words(task, tokenizer):
        acc.print(f"warning: {w}")
    sampler = EpochSampler(len(train_records), cfg.seed)
    # the global batches' positions in the training records, the same on every process (not sharded by accelerate)
    train_dl = DataLoader(range(len(train_records)), batch_size=cfg.batch_size, sampler=sampler, collate_fn=list,
                          drop_last=True)
    if len(train_dl) == 0:
        raise InputError(f"{len(train_records)} training examples, fewer than one batch of {cfg.batch_size}",
                         field="batch_size")
    optimizer, scheduler = adamw_with_schedule(reader, cfg)
    plugin = getattr(acc.state, "deepspeed_plugin", None)
    if plugin is not None:
        deepspeed_settings(plugin, cfg, acc.num_processes)
    top_parameters = reader.top_layer_parameters()  # before prepare: ZeRO-3 partitions the weights (numel 0)
    reader, optimizer, scheduler = acc.prepare(reader, optimizer, scheduler)
    encoded_train = encoded_dev = None
    if top_layers is not None:  # every process encodes every input once (in a fixed order: a resumed run agrees)
        show = cfg.show_progress and acc.is_main_process
        inner = acc.unwrap_model(reader)
        encoded_train = EncodedInputs.compute(inner, fmt, train_records, cfg.eval_batch_size, show, "encoding train")
        if cfg.eval_every and cfg.predict_mode == "scoring":  # only dev evaluations during training read them
            encoded_dev = EncodedInputs.compute(inner, fmt, dev_records, cfg.eval_batch_size, show, "encoding dev")
    resume_key = {**resume_settings(cfg), "data_sha256": {s: sha256_file(data_dir / f"{s}.jsonl")
                                                       for s in ("train", "dev")}}
    state = resume_state(acc, out, resume_key)
    if state is None:
        _check_finished_run(out, cfg, data_dir)
        acc.wait_for_everyone()  # every rank read the manifest (and refused alike) before the main one deletes it
        state = {"step": 0, "best_metric": -math.inf, "best_step": 0, "evals_without_improvement": 0, "history": []}
    if acc.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        (out / MANIFEST).unlink(missing_ok=True)
        # the log holds exactly the steps of the state resumed from (a killed run may have logged more)
        write_text(out / "train_log.jsonl", "".join(json.dumps(r) + "\n" for r in state["history"]))
    if cfg.log_with != "none":
        from ..runtime.tracking import tracker_config

        acc.init_trackers("pgra", config=tracker_config(asdict(cfg)),
                          init_kwargs={"wandb": {"dir": str(out.resolve()), "name": out.name}})
    return TrainingSetup(cfg, acc, task, data_dir, manifest, out, tokenizer, fmt, reader, optimizer, scheduler,
                         sampler, train_dl, dev_records, state, resume_key, use_deepspeed, encoded_train, encoded_dev,
                         train_records, top_parameters)


def _check_finished_run(out: Path, cfg: TrainConfig, data_dir: Path) -> None:
    """Refuse to train a finished run again with other settings or data than its manifest records."""
    from ..core.config import from_dict
    from ..core.errors import PgraError
    from ..storage.artifacts import read_json_object
    from ..storage.provenance import folder_fingerprint

    path = out / MANIFEST
    if not path.is_file():
        return
    try:
        manifest = read_json_object(path)
        recorded = from_dict(TrainConfig, manifest.get("config") or {}, source=str(path))
    except (PgraError, OSError, ValueError, TypeError):
        return
    fingerprint = manifest.get("data_fingerprint")
    if resume_settings(recorded) != resume_settings(cfg) or (fingerprint is not None
                                                             and fingerprint != folder_fingerprint(data_dir)):
        raise InputError(f"{out} holds a finished run written with another config or other data; use another --out "
                         "or delete it", field="out")


def _evaluate_dev(s: TrainingSetup, step: int) -> tuple[float, bool]:
    """Dev metric at ``step``; saves ``best/`` on improvement; returns (metric, stop early)."""
    cfg, state = s.cfg, s.state
    encoded = s.encoded_dev if cfg.predict_mode == "scoring" else None
    metric, _ = evaluate(s.acc.unwrap_model(s.reader), s.fmt, s.dev_records, cfg.eval_batch_size, cfg.predict_mode,
                         s.acc, encoded)
    s.reader.train()
    if metric > state["best_metric"]:
        state.update(best_metric=metric, best_step=step, evals_without_improvement=0)
        _save_model(s.acc, s.reader, s.tokenizer, s.out / "best", cfg, s.task, step)
        return metric, False
    state["evals_without_improvement"] += 1
    return metric, bool(cfg.early_stopping_patience
                        and state["evals_without_improvement"] >= cfg.early_stopping_patience)


def _rank_batch(s: TrainingSetup, positions: list[int], share: slice,
                ) -> tuple[dict[str, torch.Tensor], float, tuple[int, int]]:
    """This process's part of a global batch, its weight and token counts (no part: the first input at weight 0)."""
    mine = positions[share]
    records = [s.train_records[i] for i in mine or positions[:1]]
    if s.encoded_train is not None:
        index = mine or positions[:1]
        batch = {"index": torch.as_tensor(index), **s.fmt.label_batch(records)}
        inputs = s.encoded_train.tokens(index)
    else:
        batch = s.fmt.collate(records, s.cfg.pad_to_multiple)
        inputs = int(batch["attention_mask"].sum())
    weight, targets = 0.0, int((batch["labels"] != -100).sum())
    if mine:
        total = int((s.fmt.label_batch([s.train_records[i] for i in positions])["labels"] != -100).sum())
        weight = targets / total
    return ({k: v if k == "index" else v.to(s.acc.device, non_blocking=True) for k, v in batch.items()}, weight,
            (targets, inputs))


class HostValue:
    """A 0-dim tensor on its way to the host, so :meth:`read` waits only for the work queued so far."""

    def __init__(self, value: torch.Tensor) -> None:
        self.ready = None
        if value.device.type == "cuda":
            host = torch.empty((), dtype=value.dtype, pin_memory=True)
            host.copy_(value, non_blocking=True)
            self.ready = torch.cuda.Event()
            self.ready.record()
            value = host
        self.value = value

    def read(self) -> float:
        if self.ready is not None:
            self.ready.synchronize()
        return float(self.value)


def train_loop(s: TrainingSetup) -> None:
    """Train from ``s.state['step']`` to ``max_steps`` (or early stopping), evaluating and checkpointing."""
    cfg, acc, state = s.cfg, s.acc, s.state
    save_every = cfg.save_every or cfg.eval_every or cfg.max_steps
    bar = progress(total=cfg.max_steps, initial=state["step"], desc="training", unit="steps",
                   disable=not (cfg.show_progress and acc.is_main_process))
    stop = False
    share = rank_share(cfg.batch_size, acc.num_processes, acc.process_index)
    step_loss = torch.zeros((), device=acc.device)  # this process's part of the step's loss
    pending: tuple[int, HostValue, float] | None = None  # a step whose loss the host has not read yet

    def log_step(step: int, loss_sum: HostValue, lr: float, evaluate: bool = False) -> bool:
        """Read ``step``'s loss, evaluate on dev if asked, and record the step; whether early stopping ends the run."""
        mean_loss = loss_sum.read() / cfg.grad_accum
        bar.set_postfix(loss=f"{mean_loss:.4f}")  # before update: a log line shows this step's loss
        bar.update(1)
        record = {"step": step, "loss": mean_loss, "lr": lr}
        early_stop = False
        if evaluate:
            record[f"dev_{s.task.metric}"], early_stop = _evaluate_dev(s, step)
        state["history"].append(record)
        if acc.is_main_process:
            with open(s.out / "train_log.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        if cfg.log_with != "none":
            acc.log(record, step=step)
        return early_stop

    while state["step"] < cfg.max_steps and not stop:
        # an optimizer step takes grad_accum global batches, counted over epochs (a step may span two)
        epoch, offset = divmod(state["step"] * cfg.grad_accum, len(s.train_dl))
        s.sampler.set_epoch(epoch)
        s.reader.train()
        for position, positions in enumerate(itertools.islice(s.train_dl, offset, None),
                                             start=epoch * len(s.train_dl) + offset):
            # each batch's dropout from its own seed: nothing else drawing from the global RNG (a new loader
            # iterator, an evaluation) shifts it, so a resumed run equals an uninterrupted one
            torch.manual_seed(batch_seed(cfg.seed, position))
            with acc.accumulate(s.reader):
                batch, weight, (target_tokens, input_tokens) = _rank_batch(s, positions, share)
                if weight:
                    meter.add(cfg.model, target_tokens, "decoder", "trained")
                if cfg.compile and cfg.compile_mode == "reduce-overhead":
                    torch.compiler.cudagraph_mark_step_begin()  # the last step's graph outputs are read already
                if "index" in batch:  # frozen encoder layers: their stored outputs (the top layers run on them)
                    states, mask = s.encoded_train.passages(batch["index"], acc.device)
                    if weight and cfg.train_top_layers:
                        meter.add(cfg.model, input_tokens, "encoder top layers", "trained", s.top_parameters)
                    loss = s.reader(attention_mask=mask, labels=batch["labels"], stored_states=states).loss
                else:
                    if weight:
                        meter.add(cfg.model, input_tokens, "encoder", "trained")
                    loss = s.reader(batch["input_ids"], batch["attention_mask"], labels=batch["labels"]).loss
                # DDP (and DeepSpeed) average the processes' gradients: times the processes, each part's weight
                # makes the sum the global batch's token mean (accelerate divides by grad_accum)
                acc.backward(loss * (weight * acc.num_processes))
                step_loss += loss.detach().float() * weight
                if acc.sync_gradients and cfg.max_grad_norm > 0:
                    acc.clip_grad_norm_(s.reader.parameters(), cfg.max_grad_norm)
                s.optimizer.step()
                s.scheduler.step()
                s.optimizer.zero_grad()
            if not acc.sync_gradients:
                continue
            state["step"] += 1
            step = state["step"]
            # the step's loss stays on the device until the next step is queued (reading it now would idle the
            # device), or is read at once before an evaluation or checkpoint, which need this step's record
            loss_sum = HostValue(acc.gather(step_loss.reshape(1)).sum())
            step_loss = torch.zeros((), device=acc.device)
            if pending is not None:
                log_step(*pending)
            pending = (step, loss_sum, s.scheduler.get_last_lr()[0])
            evaluate = bool(cfg.eval_every and step % cfg.eval_every == 0)
            save = step % save_every == 0 or step >= cfg.max_steps
            if evaluate or save:
                stop = log_step(*pending, evaluate=evaluate)
                pending = None
            fault_point("train.step")
            if save or stop:
                save_checkpoint(acc, s.out, state, cfg.keep_checkpoints, s.resume_key)
            if step >= cfg.max_steps or stop:
                break
    if pending is not None:
        log_step(*pending)
    bar.close()
    # no evaluation ran: the final weights are the model; decided before the barrier, while no rank can have
    # written best/ (a rank looking later would skip _save_model's barrier and leave rank 0 waiting there)
    save_final = not (s.out / "best").exists()
    acc.wait_for_everyone()
    if save_final:
        _save_model(acc, s.reader, s.tokenizer, s.out / "best", cfg, s.task, state["step"])


def final_evaluation(s: TrainingSetup) -> dict[str, Any]:
    """Score ``best/`` on dev and the test split; write predictions, ``metrics.json`` and the manifest."""
    cfg, acc = s.cfg, s.acc
    results: dict[str, Any] = {}
    if s.use_deepspeed:  # the final evaluation loads `best/` as a plain model, not partitioned by ZeRO-3
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()
    if acc.is_main_process:
        best = FiDReader.from_pretrained(str(s.out / "best"), dtype=torch.float32).to(acc.device)
        best.to(resolve_dtype(cfg.eval_dtype, acc.device))
        for split in dict.fromkeys(x for x in ("dev", cfg.test_split) if x):  # test_split was checked in setup
            records = load_split(s.data_dir, split, s.task)
            metric, preds = evaluate(best, s.fmt, records, cfg.eval_batch_size, cfg.predict_mode, acc)
            results[split] = {s.task.metric: metric, "examples": len(records),
                              "invalid_predictions": sum(p is None for p in preds.labels)}
            write_records(s.out / f"predictions_{split}.jsonl", prediction_lines(records, preds, cfg.n_passages))
        write_json(s.out / "metrics.json", {"task": s.task.name, "metric": s.task.metric,
                                            "best_step": s.state["best_step"], "results": results,
                                            "train_examples": len(s.train_records)})
        write_manifest(s.out, {"kind": "reader", "task": to_dict(s.task), "model": cfg.model,
                               **data_fields(s.data_dir, s.out), "data_kind": s.data_manifest["kind"],
                               "steps": s.state["step"], "best_step": s.state["best_step"], "results": results,
                               "config": to_dict(cfg)})
    return results


@locks_output(kind="reader")
def train(cfg: TrainConfig, keep_resume_state: bool | None = None,
          timing: dict[str, float] | None = None) -> dict[str, Any]:
    """Train, select the best checkpoint on dev, evaluate it on test; returns the metrics per split. The resumable
    checkpoints are deleted once the manifest is written unless ``keep_resume_state`` (default: the config's; a
    grid's cell deletes them itself after its ``cell.json``). ``timing``: gets ``loop_s``, the training loop's
    seconds."""
    s = setup(cfg)
    start = time.time()
    train_loop(s)
    if timing is not None:
        timing["loop_s"] = time.time() - start
    results = final_evaluation(s)
    keep = cfg.keep_resume_state if keep_resume_state is None else keep_resume_state
    if not keep and s.acc.is_main_process:
        drop_resume_state(s.out)
    if cfg.log_with != "none":
        s.acc.end_training()
    return results


def _save_model(acc, reader, tokenizer, directory: Path, cfg: TrainConfig, task: TaskSpec, step: int) -> None:
    """Save the reader as a plain ``save_pretrained`` folder; every process calls this (ZeRO-3 gathers)."""
    state_dict = acc.get_state_dict(reader)
    if acc.is_main_process:
        inner = {k.removeprefix("model."): v for k, v in state_dict.items()}
        with atomic_dir(directory) as tmp:
            acc.unwrap_model(reader).save_pretrained(
                tmp, tokenizer, {"task": task.name, "task_spec": to_dict(task), "n_passages": cfg.n_passages,
                                 "input_format": cfg.input_format, "max_length": cfg.max_length, "step": step},
                state_dict=inner)
    acc.wait_for_everyone()
