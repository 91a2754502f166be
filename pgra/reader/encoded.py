"""Encoder outputs computed once per (input, evidence) pair, for a reader trained with a frozen encoder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..core.progress import progress
from ..runtime.cost import meter
from .data import ReaderFormatter


class EncodedInputs:
    """Per record: the encoder's last hidden states ``(P, L_i, H)`` of its P passages and their mask ``(P, L_i)``."""

    def __init__(self, states: list[torch.Tensor], masks: list[torch.Tensor]) -> None:
        self.states, self.masks = states, masks

    def __len__(self) -> int:
        return len(self.states)

    @classmethod
    @torch.no_grad()
    def compute(cls, reader: Any, fmt: ReaderFormatter, records: Sequence[dict[str, Any]], batch_size: int,
                show_progress: bool = False, desc: str = "encoding") -> EncodedInputs:
        """Run ``reader``'s frozen encoder layers over every record's passages, ``batch_size`` records at a time."""
        was_training = reader.training
        reader.eval()
        device = next(reader.parameters()).device
        states: list[torch.Tensor] = []
        masks: list[torch.Tensor] = []
        bar = progress(total=len(records), desc=desc, unit="inputs", disable=not show_progress)
        for start in range(0, len(records), batch_size):
            chunk = records[start:start + batch_size]
            batch = fmt.collate(chunk)
            ids, mask = batch["input_ids"], batch["attention_mask"]
            b, p, length = ids.shape
            hidden = reader.stored_states(ids.view(b * p, length).to(device), mask.view(b * p, length).to(device))
            hidden = hidden.float().cpu().view(b, p, length, -1)
            meter.add(getattr(reader, "name_or_path", "reader"), int(mask.sum()), "encoder")
            for i in range(b):
                used = int(mask[i].sum(-1).max())  # right padding: every passage's tokens lie in [0, used)
                states.append(hidden[i, :, :used].clone())
                masks.append(mask[i, :, :used].clone())
            bar.update(len(chunk))
        bar.close()
        reader.train(was_training)
        return cls(states, masks)

    def tokens(self, indices: Sequence[int] | torch.Tensor) -> int:
        """How many input tokens (every passage's, padding not counted) the records at ``indices`` hold."""
        return sum(int(self.masks[int(i)].sum()) for i in indices)

    def passages(self, indices: Sequence[int] | torch.Tensor, device: torch.device | str | None = None,
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """States ``(B, P, L, H)`` and mask ``(B, P, L)`` of the records at ``indices``, padded to the longest."""
        idx = [int(i) for i in indices]
        p, hidden = self.states[idx[0]].shape[0], self.states[idx[0]].shape[-1]
        width = max(self.states[i].shape[1] for i in idx)
        states = torch.zeros(len(idx), p, width, hidden)
        mask = torch.zeros(len(idx), p, width, dtype=torch.long)
        for row, i in enumerate(idx):
            n = self.states[i].shape[1]
            states[row, :, :n] = self.states[i]
            mask[row, :, :n] = self.masks[i]
        return states.to(device or "cpu"), mask.to(device or "cpu")

    def batch(self, indices: Sequence[int] | torch.Tensor, device: torch.device | str | None = None,
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Fused states ``(B, P*L, H)`` and mask of the records at ``indices`` (as ``FiDReader.encode`` makes them)."""
        states, mask = self.passages(indices, device)
        b, p, width, hidden = states.shape
        return states.view(b, p * width, hidden), mask.view(b, p * width)
