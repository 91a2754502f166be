"""The reader's training configuration (one dataclass; CLI flags are generated from it)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core import choices
from ..core.config import MAX_BATCH, MAX_ITEMS, MAX_TOKENS, SEED_MAX, option
from ..runtime.tracking import TRACKERS
from ..tasks import READER_FORMATS, task_names


@dataclass
class TrainConfig:
    """Everything ``pgra train`` needs (the paper's Table 7 settings are in ``configs/paper/``)."""

    data: str = option("", exists="dir", help="a reranked (or candidates) folder with {train,dev,test}.jsonl")
    out: str = option("", help="run folder (checkpoints, best/, metrics.json)")
    model: str = option("t5-base", io="in", help="encoder-decoder name or folder (t5-base, models/bert2bert-minilm ...)")
    task: str = option("", suggest=task_names, help="default: the task recorded with the data")
    n_passages: int = option(16, min=0, max=MAX_ITEMS, help="d evidence sentences per input; 0 = no retrieval")
    input_format: str = option("intended", choices=READER_FORMATS,
                               help="intended (the paper's), released (the released code's) or fid")
    max_length: int = option(128, min=1, max=MAX_TOKENS, help="tokens per (input, evidence) pair")
    learning_rate: float = option(8e-5, min=0, help="AdamW learning rate")
    batch_size: int = option(8, min=1, max=MAX_BATCH, help="global batch per optimizer step (before accumulation)")
    grad_accum: int = option(1, min=1, help="gradient accumulation steps")
    max_steps: int = option(5000, min=1, help="optimizer steps")
    warmup_steps: int = option(0, min=0, help="linear warm-up steps")
    weight_decay: float = option(0.01, min=0, help="AdamW weight decay")
    max_grad_norm: float = option(1.0, min=0, help="gradient clipping; 0 = off")
    eval_every: int = option(500, min=0, help="dev evaluation every N steps; 0 = only at the end")
    save_every: int = option(0, min=0, help="resumable checkpoint every N steps; 0 = at every evaluation")
    keep_checkpoints: int = option(1, cosmetic=True, min=1, help="resumable checkpoints kept while training")
    keep_resume_state: bool = option(False, cosmetic=True, omit_default=True, record_default=False,
                                     help="keep the resumable checkpoints (weights, AdamW's moments, scheduler, RNG: "
                                          "up to 3x best/'s size) once the run has finished; default: deleted after the "
                                          "final evaluation (in a grid, once the cell's cell.json is written), "
                                          "leaving best/, the predictions, metrics and train_log.jsonl")
    early_stopping_patience: int = option(0, min=0, help="evaluations without improvement before stopping; 0 = off")
    eval_batch_size: int = option(16, min=1, max=MAX_BATCH, help="inputs per evaluation batch")
    max_eval_examples: int = option(0, min=0, help="dev inputs used during training; 0 = all")
    max_train_examples: int = option(0, min=0, help="training inputs used; 0 = all")
    mixed_precision: str = option("no", choices=choices.MIXED_PRECISION, help="no, fp16 or bf16")
    adamw_impl: str = option("auto", choices=choices.ADAMW_IMPLS, omit_default=True,
                             help="AdamW's kernels: auto (torch's choice: foreach on a GPU, one loop per tensor on "
                                  "CPU), foreach, or fused (one kernel for all parameters; GPU and CPU)")
    compile: bool = option(False, omit_default=True,
                           help="torch.compile the reader (inductor; needs a C compiler on CPU): faster steps after "
                                "a one-time compilation; losses equal eager within float rounding")
    compile_mode: str = option("default", choices=choices.COMPILE_MODES, omit_default=True, record_default=False,
                               help="with compile: torch.compile's mode; reduce-overhead replays each step's kernels "
                                    "as CUDA graphs (GPU; one graph per batch width: see pad_to_multiple)")
    pad_to_multiple: int = option(1, min=1, max=MAX_TOKENS, omit_default=True, record_default=False,
                                  help="pad each training batch's inputs to a multiple of this many tokens (within "
                                       "max_length): fewer distinct shapes for compile and CUDA graphs to trace "
                                       "(evaluation and stored encoder states are not padded)")
    eval_dtype: str = option("fp32", choices=choices.DTYPES, omit_default=True,
                             help="precision of the best checkpoint's final dev and test predictions: fp32, bf16, "
                                  "bf16-if-native (bf16 on CPUs with bf16 hardware), auto (bf16 on a GPU)")
    freeze_encoder: bool = option(False, help="train the decoder only; the encoder's outputs are computed once per "
                                              "(input, evidence) pair and reused (fast on CPU; not the paper's)")
    train_top_layers: int | None = option(None, min=0, omit_default=True, record_default=False,
                                          help="train the encoder's top N layers (and the decoder) on the stored "
                                               "outputs of the frozen layers below them: 0 = freeze_encoder, the "
                                               "encoder's layer count = every weight trained; unset: "
                                               "freeze_encoder decides")
    gradient_checkpointing: bool = option(False, help="recompute activations to save memory")
    find_unused_parameters: bool = option(False, help="DDP: set for models with parameters the loss never "
                                                      "reaches")
    predict_mode: str = option("scoring", choices=("scoring", "generate"),
                               help="scoring = every label word's likelihood; generate = decode (the paper's)")
    seed: int = option(42, min=0, max=SEED_MAX, help="seed of initialisation order, data order and dropout")
    log_with: str = option("none", cosmetic=True, choices=TRACKERS,
                           help="tracker (wandb offline unless WANDB_MODE says otherwise)")
    test_split: str = option("test", path_segment="optional", help="split evaluated with the best checkpoint after dev (empty: none)")
    show_progress: bool = option(True, cosmetic=True, help="progress bars (a line every 30 s in a log)")
