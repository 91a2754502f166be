"""The reranker's configuration (one dataclass; CLI flags are generated from it)."""

from __future__ import annotations

from dataclasses import dataclass

from .. import choices
from ..causal_lm import lm_config
from ..config import SEED_MAX, option
from ..selection.settings import SelectorSettings


@dataclass
class _Prompting:
    """The options before the LM block (a config's fields keep one order: flags, YAML dumps and manifests)."""

    candidates: str = option("", exists="dir", help="folder written by `pgra retrieve`")
    out: str = option("", help="reranked folder to write")
    lm: str = option("facebook/opt-13b", help="causal LM name or local folder (OPT, Llama, GPT-2 ...)")
    task: str = option("", io="in", suggest=choices.task_names, help="default: the task recorded with the candidates")
    index: str = option("", exists="dir", help="default: the index recorded with the candidates (for id -> corpus row)")
    top_d: int = option(16, min=1, help="evidence kept per input (d)")
    k: int = option(0, flag="-k", min=0, help="rerank the first k candidates; 0 = all retrieved")
    num_demos: int = option(8, min=0, help="demonstrations in the prompt (m)")
    demo_selection: str = option("paper", choices=choices.demo_selections,
                                 help="paper = seeded random, balanced over labels; code = the released code's "
                                      "file order (both: one prompt for all); random, kate, skill_knn = per query")
    seed: int = option(13, min=0, max=SEED_MAX, help="seed of the demonstration draw")
    demos: SelectorSettings = option(default_factory=SelectorSettings, help="settings of the per-query strategies")
    splits: list[str] = option(path_segment=True, default_factory=lambda: ["train", "dev", "test"], help="comma-separated splits")
    cache_dir: str = option("cache/embeddings", io="store", help="persistent evidence-embedding cache")
    prefix_cache: bool = option(True, help="reuse the demonstrations' KV cache (off: whole prompts, the paper "
                                           "code's way)")


@dataclass
class RerankConfig(lm_config(max_tokens_per_batch=16384, max_batch_size=64), _Prompting):
    """Everything ``pgra rerank`` needs: the candidates and the prompt, the LM block
    (:class:`pgra.causal_lm.LMConfig`, shared with in-context learning), then the stage's own options."""

    chunk_size: int = option(1024, cosmetic=True, min=1, help="texts embedded between cache writes (resume granularity)")
    trust_remote_code: bool = option(False, help="allow the LM's own code (off: never run hub code)")
    show_progress: bool = option(True, cosmetic=True, help="progress bars (a line every 30 s in a log)")
