"""One sentence encoder for every dense retriever: any HF encoder + an explicit pooler, L2-normalised."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

from ..core.errors import InputError
from ..core.progress import progress
from ..lm.loading import load_pretrained
from ..lm.tokens import pad_sequences
from ..runtime.cost import meter
from ..runtime.device import resolve_device, resolve_dtype
from ..storage.artifacts import model_fingerprint
from .dense_config import POOLERS

Pooler = Literal["cls", "cls_before_pooler", "mean"]
GPU_ROWS = 65536  # vectors an encoder keeps on a GPU before copying them back in one transfer


class DenseEncoder:
    """Encode sentences into unit vectors.

    Poolers: ``cls`` = ``pooler_output`` (CLS after the pretrained dense+tanh pooler: the PGRA paper's BERT
    setting), ``cls_before_pooler`` = ``last_hidden_state[:, 0]`` (SimCSE's setting for unsupervised
    checkpoints), ``mean`` = attention-masked mean of the last layer (sentence-transformers models).
    Inputs are sorted by token length before batching so padding stays small.

        encoder = pgra.DenseEncoder("models/minilm", pooler="mean")
        vectors = encoder.encode(["The planet orbits the sun", "A river runs through the town"])
        print(vectors.shape, vectors @ vectors[0])   # (2, 384), cosines
    """

    rows_on_device: int | None = None  # vectors kept on the device before one copy back; None: 0 on CPU, GPU_ROWS

    def __init__(self, model_name_or_path: str, pooler: Pooler = "cls", max_length: int = 512,
                 batch_size: int = 64, device: str | None = None, dtype: str | None = None,
                 trust_remote_code: bool = False) -> None:
        if pooler not in POOLERS:
            raise InputError(f"unknown pooler '{pooler}', use one of {POOLERS}", field="pooler")
        self.name_or_path = str(model_name_or_path)
        self.pooler = pooler
        self.max_length = max_length
        self.batch_size = batch_size
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.tokenizer = load_pretrained(AutoTokenizer, self.name_or_path, "encoder's tokenizer", "encoder",
                                         trust_remote_code=trust_remote_code)
        model, info = load_pretrained(AutoModel, self.name_or_path, "encoder", "encoder", output_loading_info=True,
                                      trust_remote_code=trust_remote_code)
        missing = [k for k in info.get("missing_keys", []) if "pooler" in k]
        if pooler == "cls" and (missing or not hasattr(model, "pooler") or model.pooler is None):
            raise InputError(
                f"model '{self.name_or_path}' has no pretrained pooler weights, so pooler 'cls' would use a random "
                "layer; use pooler 'cls_before_pooler' or 'mean'", field="pooler")
        self.model = model.to(self.device, dtype=self.dtype).eval()
        self.dim = int(self.model.config.hidden_size)
        self._fingerprint: str | None = None

    @classmethod
    def from_model(cls, model: torch.nn.Module, pooler: Pooler = "cls", batch_size: int = 64,
                   name: str = "encoder") -> DenseEncoder:
        """An encoder around a model already loaded, without a tokenizer: it encodes token ids (:meth:`encode_ids`)."""
        encoder = cls.__new__(cls)
        weight = next(model.parameters())
        encoder.name_or_path, encoder.pooler, encoder.max_length, encoder.batch_size = name, pooler, 0, batch_size
        encoder.device, encoder.dtype, encoder.tokenizer = weight.device, weight.dtype, None
        encoder.model, encoder.dim, encoder._fingerprint = model.eval(), int(model.config.hidden_size), None
        return encoder

    @property
    def fingerprint(self) -> str:
        """Fingerprint of the encoder's files (see :func:`pgra.storage.artifacts.model_fingerprint`)."""
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.name_or_path)
        return self._fingerprint

    def _pool(self, out, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.pooler == "cls":
            return out.pooler_output
        hidden = out.last_hidden_state
        if self.pooler == "cls_before_pooler":
            return hidden[:, 0]
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    @torch.inference_mode()
    def encode(self, texts: Sequence[str], batch_size: int | None = None,
               show_progress: bool = False, normalize: bool = True) -> np.ndarray:
        """Float32 ``(len(texts), dim)`` L2-normalised (``normalize=False``: raw pooled) embeddings, in input order."""
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        if self.tokenizer is None:
            raise InputError(f"encoder '{self.name_or_path}' was made from a loaded model without a tokenizer "
                             "(DenseEncoder.from_model): it encodes token ids, with encode_ids")
        ids = self.tokenizer(list(texts), truncation=True, max_length=self.max_length, padding=False)["input_ids"]
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        return self.encode_ids(ids, pad_id, batch_size, show_progress, normalize)

    @torch.inference_mode()
    def encode_ids(self, ids: Sequence[Sequence[int]], pad_id: int = 0, batch_size: int | None = None,
                   show_progress: bool = False, normalize: bool = True) -> np.ndarray:
        """:meth:`encode` on token ids (on a GPU the vectors stay there for :data:`GPU_ROWS` rows at a time)."""
        bs = batch_size or self.batch_size
        out = np.empty((len(ids), self.dim), dtype=np.float32)
        if not len(ids):
            return out
        order = np.argsort([-len(x) for x in ids], kind="stable")
        uses_types = "token_type_ids" in getattr(self.tokenizer, "model_input_names", ())
        keep = self.rows_on_device if self.rows_on_device is not None else \
            (0 if self.device.type == "cpu" else GPU_ROWS)
        pending: list[torch.Tensor] = []
        pending_rows = 0
        for start in progress(range(0, len(order), bs), desc="encoding", unit="batch", disable=not show_progress):
            idx = order[start:start + bs]
            input_ids, mask = pad_sequences([list(ids[i]) for i in idx], pad_id)
            batch = {"input_ids": input_ids.to(self.device, non_blocking=True),
                     "attention_mask": mask.to(self.device, non_blocking=True)}
            if uses_types:
                batch["token_type_ids"] = torch.zeros_like(batch["input_ids"])
            pooled = self._pool(self.model(**batch), batch["attention_mask"]).float()
            meter.add(self.name_or_path, int(mask.sum()))
            pending.append(torch.nn.functional.normalize(pooled, dim=-1) if normalize else pooled)
            pending_rows += len(idx)
            done = start + len(idx)
            # copied back once `keep` rows are waiting: on a GPU the host then does not wait for every batch
            if pending_rows >= keep or done == len(order):
                out[order[done - pending_rows:done]] = torch.cat(pending).cpu().numpy()
                pending, pending_rows = [], 0
        return out
