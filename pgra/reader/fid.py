"""Fusion-in-Decoder over any HF encoder-decoder (Izacard & Grave, 2021)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

from ..core.errors import InputError

FID_CONFIG = "fid_config.json"


class FiDReader(torch.nn.Module):
    """A seq2seq model whose encoder reads several passages per input and whose decoder fuses them."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        if not getattr(model.config, "is_encoder_decoder", False):
            raise InputError(f"{type(model).__name__} is not an encoder-decoder model", field="model")
        self.model = model
        self.name_or_path = str(getattr(model.config, "_name_or_path", "") or "reader")  # the cost meter's key
        encoder = model.get_encoder()
        if getattr(encoder, "pooler", None) is not None:
            # FiD never uses a pooled encoder output (BERT encoders of an EncoderDecoderModel get one back on
            # every load); parameters without gradients would also stop DDP
            encoder.pooler = None
        if getattr(model.config, "decoder_start_token_id", None) is None and hasattr(model.config, "decoder"):
            raise InputError("the encoder-decoder config has no decoder_start_token_id", field="model")

    @property
    def config(self):
        return self.model.config

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[BaseModelOutput, torch.Tensor]:
        """Encode ``(B, P, L)`` inputs passage by passage; return fused states ``(B, P*L, H)`` and mask."""
        b, p, length = input_ids.shape
        hidden = self.model.get_encoder()(input_ids=input_ids.view(b * p, length),
                                          attention_mask=attention_mask.view(b * p, length)).last_hidden_state
        return (BaseModelOutput(last_hidden_state=hidden.reshape(b, p * length, hidden.shape[-1])),
                attention_mask.reshape(b, p * length))

    def freeze_encoder(self, top_layers: int = 0) -> None:
        """Train only the decoder and the encoder's top ``top_layers``: the rest runs in eval mode without gradients."""
        self.frozen_encoder = True
        encoder = self.model.get_encoder()
        frozen = [encoder, self.model.get_input_embeddings()]
        decoder = self.model.get_decoder()
        frozen += [decoder.get_input_embeddings(), self.model.get_output_embeddings()]
        for module in frozen:
            if module is not None:
                for p in module.parameters():
                    p.requires_grad_(False)
        self.top_layers = top_layers
        if top_layers:
            from .split import encoder_split

            self.split = encoder_split(encoder)
            self.lower_layers = len(self.split.layers(encoder)) - top_layers
            if self.lower_layers < 1:
                raise ValueError(f"top_layers={top_layers} leaves no frozen encoder layer")
            for module in self.split.top_modules(encoder, self.lower_layers):
                for p in module.parameters():
                    p.requires_grad_(True)
        self._frozen_modes(self.training)

    def top_layer_parameters(self) -> int:
        """The parameters of the encoder's top layers that train over the frozen ones (0 without them)."""
        if not getattr(self, "top_layers", 0):
            return 0
        modules = self.split.top_modules(self.model.get_encoder(), self.lower_layers)
        # a ZeRO-3 partitioned weight's numel() is 0: its full size is ds_numel
        return sum(int(getattr(p, "ds_numel", p.numel())) for p in {id(p): p for m in modules for p in m.parameters()}.values())

    def _frozen_modes(self, mode: bool) -> None:
        """The frozen layers in eval mode, the encoder's top layers that train in ``mode``."""
        encoder = self.model.get_encoder()
        encoder.eval()
        if getattr(self, "top_layers", 0):
            for module in self.split.top_modules(encoder, self.lower_layers):
                module.train(mode)

    def train(self, mode: bool = True) -> FiDReader:
        super().train(mode)
        if getattr(self, "frozen_encoder", False):
            self._frozen_modes(mode)
        return self

    def stored_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The hidden states ``(N, L, H)`` of the encoder's frozen layers for ``(N, L)`` inputs."""
        encoder = self.model.get_encoder()
        if getattr(self, "top_layers", 0):
            return self.split.bottom(encoder, input_ids, attention_mask, self.lower_layers)
        return encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def encode_stored(self, states: torch.Tensor, attention_mask: torch.Tensor) -> tuple[BaseModelOutput,
                                                                                         torch.Tensor]:
        """Fused encoder outputs ``(B, P*L, H)`` and mask from stored states ``(B, P, L, H)``."""
        b, p, length, hidden = states.shape
        if getattr(self, "top_layers", 0):
            states = self.split.top(self.model.get_encoder(), states.reshape(b * p, length, hidden),
                                    attention_mask.reshape(b * p, length), self.lower_layers)
        return (BaseModelOutput(last_hidden_state=states.reshape(b, p * length, hidden)),
                attention_mask.reshape(b, p * length))

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, decoder_input_ids: torch.Tensor | None = None,
                encoder_states: torch.Tensor | None = None, stored_states: torch.Tensor | None = None):
        """The seq2seq loss/logits; ``encoder_states`` or ``stored_states`` replace running the encoder."""
        if encoder_states is not None:
            enc, mask = BaseModelOutput(last_hidden_state=encoder_states), attention_mask
        elif stored_states is not None:
            enc, mask = self.encode_stored(stored_states, attention_mask)
        else:
            enc, mask = self.encode(input_ids, attention_mask)
        return self.model(encoder_outputs=enc, attention_mask=mask, labels=labels,
                          decoder_input_ids=decoder_input_ids)

    @torch.no_grad()
    def score_targets(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      targets: torch.Tensor, target_mask: torch.Tensor) -> torch.Tensor:
        """Summed log-likelihood ``(B, C)`` of the C label ``targets`` (the encoder runs once per input)."""
        enc, mask = self.encode(input_ids, attention_mask)
        return self.score_encoded(enc.last_hidden_state, mask, targets, target_mask)

    @torch.no_grad()
    def score_encoded(self, states: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor,
                      target_mask: torch.Tensor) -> torch.Tensor:
        """:meth:`score_targets` on fused encoder states ``(B, P*L, H)`` and their mask ``(B, P*L)``."""
        b, c = states.shape[0], targets.shape[0]
        states = states.repeat_interleave(c, dim=0)
        mask = mask.repeat_interleave(c, dim=0)
        labels = targets.repeat(b, 1).masked_fill(target_mask.repeat(b, 1) == 0, -100)
        logits = self.model(encoder_outputs=BaseModelOutput(last_hidden_state=states), attention_mask=mask,
                            labels=labels).logits
        logp = torch.log_softmax(logits.float(), dim=-1)
        token_lp = logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1) * (labels != -100)
        return token_lp.sum(-1).view(b, c)

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int = 3,
                 **kwargs) -> torch.Tensor:
        enc, mask = self.encode(input_ids, attention_mask)
        return self.model.generate(encoder_outputs=enc, attention_mask=mask, max_new_tokens=max_new_tokens,
                                   **kwargs)

    def save_pretrained(self, directory: str | Path, tokenizer=None, fid_config: dict | None = None,
                        state_dict: dict | None = None) -> None:
        directory = Path(directory)
        self.model.save_pretrained(directory, safe_serialization=True, state_dict=state_dict)
        if tokenizer is not None:
            tokenizer.save_pretrained(directory)
        if fid_config is not None:
            (directory / FID_CONFIG).write_text(json.dumps(fid_config, indent=2))

    @classmethod
    def from_pretrained(cls, name_or_path: str, **kwargs) -> FiDReader:
        """Load any HF encoder-decoder; weights the checkpoint lacks (beyond what FiD drops) are warned about."""
        from ..lm.loading import load_pretrained

        model, info = load_pretrained(AutoModelForSeq2SeqLM, name_or_path, "encoder-decoder reader", "model",
                                      output_loading_info=True, **kwargs)
        missing = unexpected_missing(info.get("missing_keys", []))
        if missing:
            warnings.warn(f"{name_or_path}: {len(missing)} weights are not in the checkpoint and start random "
                          f"(e.g. {', '.join(sorted(missing)[:3])}); fine for a new reader, wrong for a trained one",
                          stacklevel=2)
        reader = cls(model)
        reader.name_or_path = str(name_or_path)
        return reader


def unexpected_missing(missing_keys) -> list[str]:
    """Missing checkpoint keys other than an encoder pooler (FiD drops it; EncoderDecoderModel re-creates it)."""
    return [k for k in missing_keys if ".pooler." not in f".{k}"]


def load_tokenizer(name_or_path: str):
    from ..lm.loading import load_pretrained

    return load_pretrained(AutoTokenizer, name_or_path, "reader's tokenizer", "model")
