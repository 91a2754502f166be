"""The one causal-LM base under every model pgra prompts: loading, device, a shared KV head, batches, cost."""

from __future__ import annotations

import gc
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core import choices
from ..core.config import MAX_BATCH, MAX_TOKENS, option
from ..core.errors import InputError
from ..runtime.cost import meter
from .loading import load_pretrained

DEVICE_MAPS = ("none", "auto")  # how a causal LM's weights are placed (LMConfig.device_map)
_BUDGET = {"min": 1, "max": MAX_TOKENS, "help": "token budget of one LM batch (tokens every row shares, a prompt's head, count)"}
_ROWS = {"min": 1, "max": MAX_BATCH, "help": "inputs per LM batch at most"}


@dataclass
class LMConfig:
    """How a stage's causal LM runs (rerank and ICL share it; :func:`lm_config` gives other batch defaults)."""

    device: str = option("auto", cosmetic=True, help="auto, cpu, cuda ...")
    dtype: str = option("auto", choices=choices.DTYPES,
                        help="auto = bf16/fp16 on GPU, fp32 on CPU; bf16-if-native = auto but bf16 on CPUs with "
                             "avx512_bf16 or AMX")
    attn_implementation: str = option("auto", help="auto = eager on CPU, sdpa on GPU; or flash_attention_2 ...")
    max_tokens_per_batch: int = option(4096, **_BUDGET)
    max_batch_size: int = option(16, **_ROWS)
    max_context: int = option(0, min=0, max=MAX_TOKENS, help="LM context in tokens; 0 = the LM's own")
    device_map: str = option("none", choices=DEVICE_MAPS, cosmetic=True, omit_default=True, record_default=False,
                             help="none = the LM loaded straight onto this process's device; auto = spread over "
                                  "every GPU the process sees (an LM larger than one GPU; one rank per node)")

    def lm_settings(self) -> dict[str, Any]:
        """The block as :class:`CausalLM`'s keyword arguments (``max_context`` 0: the LM's own)."""
        auto = {"device_map": self.device_map} if self.device_map != "none" else {}
        return {"device": self.device, "dtype": self.dtype, "attn_implementation": self.attn_implementation,
                "max_tokens_per_batch": self.max_tokens_per_batch, "max_batch_size": self.max_batch_size,
                "max_context": self.max_context or None, **auto}


def lm_config(max_tokens_per_batch: int, max_batch_size: int) -> type[LMConfig]:
    """:class:`LMConfig` with other batch defaults (the reranker's texts are short: larger batches)."""
    budget, rows = max_tokens_per_batch, max_batch_size  # (a class body reads its own names before the function's)

    @dataclass
    class BatchDefaults(LMConfig):
        max_tokens_per_batch: int = option(budget, **_BUDGET)
        max_batch_size: int = option(rows, **_ROWS)

    BatchDefaults.__qualname__ = BatchDefaults.__name__ = f"LMConfig{max_tokens_per_batch}x{max_batch_size}"
    return BatchDefaults


@dataclass
class LMCost:
    """The one cost record of a causal LM's work: ``calls`` (inputs asked about) and ``tokens`` (tokens run)."""

    calls: int = 0
    tokens: int = 0

    @property
    def tokens_run(self) -> int:
        """``tokens``, under the name manifests and benchmarks report it by."""
        return self.tokens

    def __add__(self, other: LMCost) -> LMCost:
        return LMCost(self.calls + other.calls, self.tokens + other.tokens)

    def as_dict(self) -> dict[str, int]:
        return {"lm_calls": self.calls, "lm_tokens": self.tokens}

    @classmethod
    def from_dict(cls, record: dict[str, Any] | None) -> LMCost:
        """The record written by :meth:`as_dict` (or any dict with those keys, e.g. a selection's cost)."""
        record = record or {}
        return cls(int(record.get("lm_calls", 0)), int(record.get("lm_tokens", 0)))


def _causal_lm_names() -> tuple[set[str], set[str], set[str]]:
    """transformers' causal-LM model types and class names, and its masked-LM (encoder) model types."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    classes = {c for v in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values() for c in ((v,) if isinstance(v, str) else v)}
    return set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), classes, set(MODEL_FOR_MASKED_LM_MAPPING_NAMES)


def check_causal_lm(config: Any, name: str, field: str) -> None:
    """Refuse, before any weights load, a model whose config is not a causal LM's (own code: left to it)."""
    if getattr(config, "auto_map", None):
        return
    types, classes, encoders = _causal_lm_names()
    model_type = getattr(config, "model_type", "") or ""
    archs = [a for a in (getattr(config, "architectures", None) or []) if isinstance(a, str)]
    if model_type in encoders:
        causal = bool(getattr(config, "is_decoder", False) or getattr(config, "causal", False))
    else:
        causal = model_type in types or any(a in classes for a in archs)
    if not causal:
        kind = ", an encoder" if model_type in encoders else ""
        what = f"a {archs[0]}" if archs else "a model"
        raise InputError(f"'{name}' is {what} (model type '{model_type or '?'}'{kind}), not a causal LM; this field "
                         "needs a causal (decoder-only) LM such as OPT, GPT-2, Llama or SmolLM2", field=field)


def newly_initialised(info: dict[str, Any]) -> list[str]:
    """The parameters ``from_pretrained`` initialised at random (missing and mismatched keys), sorted."""
    keys = set(info.get("missing_keys") or ())
    keys |= {k[0] if isinstance(k, (tuple, list)) else k for k in info.get("mismatched_keys") or ()}
    return sorted(str(k) for k in keys)


def load_trained(loader: Any, name: str, what: str, field: str, need: str, **kwargs: Any) -> Any:
    """:func:`pgra.lm.loading.load_pretrained`, refusing weights transformers would initialise at random."""
    model, info = load_pretrained(loader, name, what, field, output_loading_info=True, **kwargs)
    fresh = newly_initialised(info)
    if fresh:
        shown = ", ".join(fresh[:4]) + (f" ... ({len(fresh)} in all)" if len(fresh) > 4 else "")
        raise InputError(f"the {what} '{name}' lacks weights its {type(model).__name__} needs: {shown} would be "
                         f"initialised at random (different results on every run); this field needs {need}",
                         field=field)
    return model


def load_arguments(device: Any, dtype: Any, attn_implementation: str | None, trust_remote_code: bool,
                   device_map: str | None = None) -> dict[str, Any]:
    """``from_pretrained``'s arguments for a causal LM on ``device`` (straight onto a GPU, or ``device_map=auto``)."""
    kwargs: dict[str, Any] = {"dtype": dtype, "trust_remote_code": trust_remote_code}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    if getattr(device, "type", str(device)) != "cpu":
        kwargs["device_map"] = "auto" if device_map == "auto" else {"": str(device)}
    return kwargs


def check_device_map(device_map: str | None, device: Any, field: str = "device_map") -> None:
    """Refuse an unknown ``device_map``, and ``auto`` on a GPU with several ranks on this node."""
    from ..runtime.device import ranks_per_node

    if device_map not in (None, *DEVICE_MAPS):
        raise InputError(f"unknown device_map {device_map!r}, use one of {', '.join(DEVICE_MAPS)}", field=field)
    ranks = ranks_per_node()
    if device_map == "auto" and getattr(device, "type", "cpu") != "cpu" and ranks is not None and ranks > 1:
        raise InputError(f"device_map auto spreads the LM over every GPU this process sees, but {ranks} ranks run on "
                         "this node: start one rank per node (torchrun --nproc-per-node 1), or use device_map none",
                         field=field)


def context_limit(config: Any, default: int = 2048) -> int:
    """A model's context in tokens (the smaller of its config's position limits), else ``default``."""
    limits = [getattr(config, a, None) for a in ("max_position_embeddings", "n_positions")]
    limits = [x for x in limits if isinstance(x, int) and x > 0]
    return min(limits) if limits else default


def token_batches(lengths: Sequence[int], max_tokens: float, max_batch_size: int, extra: int = 0) -> list[list[int]]:
    """Positions of ``lengths``, longest first, grouped so that each padded batch (plus ``extra`` shared tokens)
    stays within ``max_tokens`` and ``max_batch_size`` rows; a longer row runs alone."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    cur: list[int] = []
    width = 0
    for i in order:
        w = max(width, lengths[i])
        if cur and ((len(cur) + 1) * (w + extra) > max_tokens or len(cur) >= max_batch_size):
            batches.append(cur)
            cur, w = [], lengths[i]
        cur.append(i)
        width = w
    return batches + ([cur] if cur else [])


class CausalLM:
    """A causal LM by name or folder, its tokenizer and config loaded now, its weights on first use.

    ``head``: ``"lm"`` (logits) or ``"none"`` (hidden states); ``attn_implementation`` ``"auto"``: eager on CPU (sdpa
    was ~10x slower for these small batches), sdpa on GPU."""

    def __init__(self, name_or_path: str, device: str | None = None, dtype: str | None = None,
                 attn_implementation: str | None = "auto", max_tokens_per_batch: int = 4096,
                 max_batch_size: int = 16, max_context: int | None = None, trust_remote_code: bool = False,
                 head: str = "lm", role: str = "LM", field: str = "lm", needs: str = "this",
                 device_map: str | None = None) -> None:
        from transformers import AutoConfig, AutoTokenizer

        from ..runtime.device import resolve_device, resolve_dtype

        self.name_or_path = str(name_or_path)
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        check_device_map(device_map, self.device)
        self._device_map = device_map
        if attn_implementation == "auto":
            attn_implementation = "eager" if self.device.type == "cpu" else "sdpa"
        self._attn, self._trust, self._head = attn_implementation, trust_remote_code, head
        self._role, self._field = role, field
        self.tokenizer = load_pretrained(AutoTokenizer, self.name_or_path, f"{role}'s tokenizer", field,
                                         trust_remote_code=trust_remote_code)
        self.config = load_pretrained(AutoConfig, self.name_or_path, role, field, trust_remote_code=trust_remote_code)
        if getattr(self.config, "is_encoder_decoder", False):
            raise InputError(f"{self.name_or_path} is an encoder-decoder model; {needs} needs a causal LM",
                             field=field)
        check_causal_lm(self.config, self.name_or_path, field)
        self.max_context = max_context or context_limit(self.config)
        self.max_tokens_per_batch, self.max_batch_size = max_tokens_per_batch, max_batch_size
        self._model = None
        self.cost = LMCost()

    def adopt(self, model, tokenizer, max_tokens_per_batch: int, max_batch_size: int,
              max_context: int | None = None) -> None:
        """Wrap a model already in memory (no loading; e.g. random weights built from a config)."""
        param = next(model.parameters())
        self.name_or_path = getattr(model.config, "name_or_path", "") or type(model).__name__
        self.device, self.dtype = param.device, param.dtype
        self._attn, self._trust, self._head = getattr(model.config, "_attn_implementation", None), False, "none"
        self._device_map = None
        self._role, self._field = "LM", "lm"
        self.tokenizer, self.config = tokenizer, model.config
        self.max_tokens_per_batch, self.max_batch_size = max_tokens_per_batch, max_batch_size
        self.max_context = max_context or int(getattr(model.config, "max_position_embeddings", 2048))
        self._model = model.eval()
        self.cost = LMCost()

    @property
    def model(self):
        """The weights, loaded on first use (a warm cache or a cached rewrite never needs them)."""
        if self._model is None:
            from transformers import AutoModel, AutoModelForCausalLM

            loader = AutoModelForCausalLM if self._head == "lm" else AutoModel
            kwargs = load_arguments(self.device, self.dtype, self._attn, self._trust, self._device_map)
            what = "causal LM" if self._role == "LM" else self._role
            need = "a trained causal LM with its LM head (a ...ForCausalLM checkpoint)" if self._head == "lm" \
                else "a trained causal LM"
            model = load_trained(loader, self.name_or_path, what, self._field, need, **kwargs)
            if "device_map" not in kwargs:
                model = model.to(self.device)
            elif kwargs["device_map"] == "auto":  # inputs go where the embeddings are; outputs come back there
                self.device = _input_device(model)
            self._model = model.eval()
        return self._model

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def release(self) -> None:
        """Drop the weights (they load again when next needed)."""
        self._model = None
        gc.collect()

    def accepts(self, argument: str) -> bool:
        """Whether the model's ``forward`` takes ``argument`` (``position_ids``, ``logits_to_keep`` ...)."""
        model = self.model
        if getattr(self, "_arguments", (None,))[0] is not model:
            self._arguments = (model, set(inspect.signature(model.forward).parameters))
        return argument in self._arguments[1]

    @property
    def cache_kwarg(self) -> str:
        """The name ``forward`` takes a KV cache under: ``cache`` (transformers 5.x) or ``past_key_values``."""
        return "cache" if self.accepts("cache") else "past_key_values"

    @property
    def pad_id(self) -> int:
        """The id padding is filled with (never attended to): the tokenizer's pad, else its end of sequence, else 0."""
        tok = self.tokenizer
        pad = getattr(tok, "pad_token_id", None)  # a model adopted without a tokenizer runs token ids only
        if pad is None:
            pad = getattr(tok, "eos_token_id", None)
        return pad if pad is not None else 0

    def ids(self, text: str) -> list[int]:
        """Token ids of ``text`` with the tokenizer's special tokens."""
        return self.tokenizer(text, add_special_tokens=True)["input_ids"]

    def batches(self, lengths: Sequence[int], extra: int = 0) -> list[list[int]]:
        """:func:`token_batches` under this LM's token budget and batch size."""
        return token_batches(lengths, self.max_tokens_per_batch, self.max_batch_size, extra)

    def count(self, tokens: int, calls: int = 0) -> None:
        """Work the LM did: ``tokens`` run (also added to the process-wide meter) and ``calls`` inputs answered."""
        self.cost.tokens += int(tokens)
        self.cost.calls += int(calls)
        meter.add(self.name_or_path, tokens)

    def head_cache(self, ids: list[int]) -> list:
        """The per-layer KV cache of one token sequence every row shares (a prompt head), run once and counted."""
        import torch

        from .kv import cache_layers, output_cache

        t = torch.as_tensor([ids], device=self.device)
        keep = {"logits_to_keep": 1} if self._head == "lm" and self.accepts("logits_to_keep") else {}
        out = self.model(input_ids=t, attention_mask=torch.ones_like(t), use_cache=True, **keep)
        self.count(len(ids))
        return cache_layers(output_cache(out))


def _input_device(model: Any) -> Any:
    """The device a model spread over several (``device_map="auto"``) takes its inputs on: its input embeddings'."""
    try:
        return model.get_input_embeddings().weight.device
    except (AttributeError, NotImplementedError):
        return next(model.parameters()).device


def expand_cache(layers: list, n: int):
    """A cache holding ``layers`` (one row each) repeated for ``n`` rows without copying them."""
    from .kv import build_cache

    return build_cache([(k.expand(n, *k.shape[1:]), v.expand(n, *v.shape[1:])) for k, v in layers])


__all__ = ["DEVICE_MAPS", "CausalLM", "LMConfig", "LMCost", "check_causal_lm", "check_device_map", "context_limit",
           "expand_cache", "lm_config", "load_arguments", "load_trained", "newly_initialised", "token_batches"]
