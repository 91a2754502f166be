"""In-context learning's configuration (one dataclass; CLI flags are generated from it)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.config import MAX_ITEMS, SEED_MAX, option
from ..lm.causal_lm import LMConfig
from ..selection.registered import STRATEGIES
from ..selection.settings import SelectorSettings


@dataclass
class _Selection:
    """The options before the LM block (a config's fields keep one order: flags, YAML dumps and manifests)."""

    data: str = option("", exists="dir", help="a task folder with {train,dev,test}.jsonl (e.g. `pgra retrieve`'s candidates)")
    out: str = option("", help="run folder (manifest, predictions_<split>.jsonl, metrics.json)")
    lm: str = option("facebook/opt-13b", help="causal LM name or local folder")
    selection: str = option("kate", choices=STRATEGIES.names,
                            help="how each input's demonstrations are chosen")
    num_demos: int = option(8, min=0, max=MAX_ITEMS, help="demonstrations per input (m)")
    seed: int = option(13, min=0, max=SEED_MAX, help="seed of random selections")
    demos: SelectorSettings = option(default_factory=SelectorSettings, help="strategy settings")
    pool: int = option(0, min=0, max=MAX_ITEMS, help="draw demonstrations from a fixed sample of this many training inputs (the "
                                      "same whatever the seed; Skill-KNN rewrites only these); 0 = all")
    pool_seed: int = option(13, min=0, max=SEED_MAX, help="seed of the pool's sample")
    length_normalise: bool = option(False, help="score a label by its mean token log-probability (default: sum)")
    splits: list[str] = option(path_segment=True, default_factory=lambda: ["dev", "test"], help="comma-separated splits to predict")


@dataclass
class ICLConfig(LMConfig, _Selection):
    """Everything ``pgra icl`` needs: the data, the causal LM and how demonstrations are selected, the LM block
    (:class:`pgra.lm.causal_lm.LMConfig`, shared with the reranker), then the stage's own options."""

    trust_remote_code: bool = option(False, help="allow the LM's own code (off: never run hub code)")
    show_progress: bool = option(True, cosmetic=True, help="progress bars (a line every 30 s in a log)")
