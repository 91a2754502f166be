"""An encoder split into a frozen bottom and a trainable top (``train_top_layers``), one adapter per architecture."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from transformers.masking_utils import create_bidirectional_mask

from ..core.registry import Registry


class EncoderSplit:
    """How one architecture's encoder runs its first ``k`` layers and its last ``L - k`` layers separately."""

    name: ClassVar[str] = ""

    @staticmethod
    def layers(encoder: Any) -> torch.nn.ModuleList:
        """The encoder's layers, bottom first."""
        raise NotImplementedError

    @staticmethod
    def bottom(encoder: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, k: int) -> torch.Tensor:
        """Hidden states ``(N, L, H)`` after the embeddings and the first ``k`` layers."""
        raise NotImplementedError

    @staticmethod
    def top(encoder: Any, hidden: torch.Tensor, attention_mask: torch.Tensor, k: int) -> torch.Tensor:
        """The encoder's last hidden states ``(N, L, H)`` from the states ``bottom`` returned for ``k``."""
        raise NotImplementedError

    @classmethod
    def top_modules(cls, encoder: Any, k: int) -> list[torch.nn.Module]:
        """The modules ``top`` runs for ``k`` (they train; everything else of the encoder stays frozen)."""
        return list(cls.layers(encoder)[k:])


SPLITS: Registry[type[EncoderSplit]] = Registry("encoder split", field="train_top_layers", hyphens=True,
                                                 base=EncoderSplit)


def _mask(encoder: Any, hidden: torch.Tensor, attention_mask: torch.Tensor):
    """The attention mask the encoder's layers take, built as the encoder's own forward builds it."""
    return create_bidirectional_mask(config=encoder.config, inputs_embeds=hidden, attention_mask=attention_mask)


@SPLITS.register
class BertSplit(EncoderSplit):
    """BERT-style encoders (the demo's bert2bert): embeddings, then ``encoder.layer``; no final norm."""

    name = "bert"

    @staticmethod
    def layers(encoder: Any) -> torch.nn.ModuleList:
        return encoder.encoder.layer

    @staticmethod
    def bottom(encoder: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, k: int) -> torch.Tensor:
        hidden = encoder.embeddings(input_ids=input_ids)
        mask = _mask(encoder, hidden, attention_mask)
        for layer in encoder.encoder.layer[:k]:
            hidden = layer(hidden, mask)
        return hidden

    @staticmethod
    def top(encoder: Any, hidden: torch.Tensor, attention_mask: torch.Tensor, k: int) -> torch.Tensor:
        mask = _mask(encoder, hidden, attention_mask)
        for layer in encoder.encoder.layer[k:]:
            hidden = layer(hidden, mask)
        return hidden


@SPLITS.register
class T5Split(EncoderSplit):
    """T5 encoder stacks: embeddings, ``block`` (the first holds the shared position bias), final norm and dropout."""

    name = "t5"

    @staticmethod
    def layers(encoder: Any) -> torch.nn.ModuleList:
        return encoder.block

    @staticmethod
    def _run(encoder: Any, hidden: torch.Tensor, attention_mask: torch.Tensor, blocks) -> torch.Tensor:
        mask = _mask(encoder, hidden, attention_mask)
        length = hidden.shape[1]
        bias = encoder.block[0].layer[0].SelfAttention.compute_bias(length, length, device=hidden.device)
        for block in blocks:
            hidden, bias, _ = block(hidden, mask, bias)
        return hidden

    @staticmethod
    def bottom(encoder: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, k: int) -> torch.Tensor:
        hidden = encoder.dropout(encoder.embed_tokens(input_ids))
        return T5Split._run(encoder, hidden, attention_mask, encoder.block[:k])

    @staticmethod
    def top(encoder: Any, hidden: torch.Tensor, attention_mask: torch.Tensor, k: int) -> torch.Tensor:
        hidden = T5Split._run(encoder, hidden, attention_mask, encoder.block[k:])
        return encoder.dropout(encoder.final_layer_norm(hidden))

    @classmethod
    def top_modules(cls, encoder: Any, k: int) -> list[torch.nn.Module]:
        return [*encoder.block[k:], encoder.final_layer_norm, encoder.dropout]


def encoder_split(encoder: Any) -> type[EncoderSplit]:
    """The split of ``encoder`` (by ``config.model_type``); an unknown one is an InputError."""
    return SPLITS.part(str(getattr(encoder.config, "model_type", type(encoder).__name__)))
