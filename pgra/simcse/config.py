"""The SimCSE training configuration (one dataclass; CLI flags are generated from it)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core import choices
from ..core.config import MAX_BATCH, MAX_ITEMS, MAX_TOKENS, SEED_MAX, option
from ..data.corpus import CorpusOptions
from .quality import RetrievalEvalConfig


@dataclass
class SimCSEConfig(CorpusOptions):
    """Everything ``pgra train-simcse`` needs (the SimCSE paper's unsupervised settings are the defaults)."""

    split: str = option("train", help="split of an HF dataset corpus")
    encoder: str = option("bert-base-uncased", help="starting HF encoder (name or folder)")
    out: str = option("", help="output folder: a plain HF encoder folder (+ manifest, metrics, .simcse/ state)")
    max_length: int = option(32, min=1, max=MAX_TOKENS, help="tokens per sentence (SimCSE: 32)")
    batch_size: int = option(64, min=2, max=MAX_BATCH, help="global batch: sentences per step, the in-batch negatives")
    learning_rate: float = option(3e-5, help="AdamW learning rate (SimCSE BERT-base: 3e-5)")
    max_steps: int = option(1000, min=1, help="optimizer steps")
    warmup_steps: int = option(0, min=0, help="linear warm-up steps (then linear decay to 0)")
    weight_decay: float = option(0.0, min=0, help="AdamW weight decay")
    temperature: float = option(0.05, above=0, help="softmax temperature of the contrastive loss")
    dropout: float = option(-1.0, min=-1, max=1, help="hidden and attention dropout; -1 = the model's own (0.1 for BERT)")
    heldout: int = option(1000, min=2, max=MAX_ITEMS, help="corpus sentences held out for alignment / uniformity")
    eval_batch_size: int = option(128, min=1, max=MAX_BATCH, help="sentences per evaluation batch")
    save_every: int = option(0, min=0, help="resumable checkpoint every N steps; 0 = only at the end")
    keep_checkpoints: int = option(1, cosmetic=True, min=1, help="resumable checkpoints kept")
    mixed_precision: str = option("no", choices=choices.MIXED_PRECISION, help="no, fp16 or bf16")
    seed: int = option(42, min=0, max=SEED_MAX, help="seed of the MLP head, the held-out split, data order and dropout")
    show_progress: bool = option(True, cosmetic=True, help="progress bars (a line every 30 s in a log)")
    retrieval_eval: RetrievalEvalConfig = option(
        default_factory=RetrievalEvalConfig,
        help="retrieval measured before and after training (same-group recall@k, kNN accuracy; pgra eval-encoder)")
