"""The reranker's configuration (one dataclass; CLI flags are generated from it).

``reranker`` picks the registered reranker (:mod:`pgra.rerank.base`); each reranker with options has its own
section ``rerank.<name>`` declared in its file (``rerank.mmr.lambda_`` ...), added here from the registry when a config is
read (:func:`rerank_config`; ``pgra rerank`` and an experiment's ``rerank`` section, :class:`RerankSection`). The
choice and the sections are declared ``option(omit_default=True, record_default=False)``: at their defaults they
are in no key and no recorded config, so every prompt-guided stage keeps the key and manifest it had before
rerankers were a family.
"""

from __future__ import annotations

from dataclasses import dataclass, make_dataclass
from typing import Any

from ..core.config import MAX_BATCH, MAX_ITEMS, SEED_MAX, option
from ..lm.causal_lm import lm_config
from ..selection.registered import STRATEGIES
from ..selection.settings import SelectorSettings
from ..tasks import task_names

CORPUS_PASSES = ("off", "candidates", "corpus")  # what the corpus pass embeds (prompt_guided/corpus_pass.py)


@dataclass
class _Prompting:
    """The options before the LM block (a config's fields keep one order: flags, YAML dumps and manifests)."""

    candidates: str = option("", exists="dir", help="folder written by `pgra retrieve`")
    out: str = option("", help="reranked folder to write")
    lm: str = option("facebook/opt-13b", help="causal LM name or local folder (OPT, Llama, GPT-2 ...)")
    task: str = option("", io="in", suggest=task_names, help="default: the task recorded with the candidates")
    index: str = option("", exists="dir", help="default: the index recorded with the candidates (for id -> corpus row)")
    top_d: int = option(16, min=1, max=MAX_ITEMS, help="evidence kept per input (d)")
    k: int = option(0, flag="-k", min=0, max=MAX_ITEMS, help="rerank the first k candidates; 0 = all retrieved")
    num_demos: int = option(8, min=0, max=MAX_ITEMS, help="demonstrations in the prompt (m)")
    demo_selection: str = option("paper", choices=STRATEGIES.names,
                                 help="paper = seeded random, balanced over labels; code = the released code's "
                                      "file order (both: one prompt for all); random, kate, skill_knn = per query")
    seed: int = option(13, min=0, max=SEED_MAX, help="seed of the demonstration draw")
    demos_in_train: bool = option(True, help="a shared prompt's demonstrations stay in the reranked train split, so "
                                             "PGRA's reader trains on the inputs FiD's and the others' do; false "
                                             "drops them (fewer training inputs than the compared readers)")
    demos: SelectorSettings = option(default_factory=SelectorSettings, help="settings of the per-query strategies")
    splits: list[str] = option(path_segment=True, default_factory=lambda: ["train", "dev", "test"], help="comma-separated splits")
    cache_dir: str = option("cache/embeddings", io="store", help="persistent evidence-embedding cache")
    prefix_cache: bool = option(True, help="reuse the demonstrations' KV cache (off: whole prompts, the paper "
                                           "code's way)")


@dataclass
class PromptGuidedConfig(lm_config(max_tokens_per_batch=16384, max_batch_size=64), _Prompting):
    """Everything ``pgra rerank`` needs: the candidates and the prompt, the LM block
    (:class:`pgra.lm.causal_lm.LMConfig`, shared with in-context learning), then the stage's own options."""

    chunk_size: int = option(1024, cosmetic=True, min=1, max=MAX_BATCH, help="texts embedded between cache writes (resume granularity)")
    corpus_pass: str = option("off", choices=CORPUS_PASSES, cosmetic=True, record_default=False,
                              help="embed up front, once per prompt: candidates = every split's retrieved candidates "
                                   "and queries (then any k up to the retrieved one runs no LM), corpus = every "
                                   "corpus sentence too (any k, pgra_full); off = only what this k reads")
    trust_remote_code: bool = option(False, help="allow the LM's own code (off: never run hub code)")
    show_progress: bool = option(True, cosmetic=True, help="progress bars (a line every 30 s in a log)")


def _family_fields() -> list[tuple[str, Any, Any]]:
    """The ``reranker`` choice and one section per registered reranker with options."""
    from .base import DEFAULT, RERANKERS

    RERANKERS.load_builtin()
    fields: list[tuple[str, Any, Any]] = [
        ("reranker", str, option(DEFAULT, choices=RERANKERS.names, omit_default=True, record_default=False,
                                 help="the reranker: prompt_guided (the paper's), cross_encoder, query_likelihood "
                                      "(UPR), mmr, random or a registered plug-in (docs/rerankers.md)"))]
    for cls in RERANKERS.values():
        if cls.options is not None:
            fields.append((cls.name, cls.options, option(default_factory=cls.options, flag=False,
                                                         omit_default=True, record_default=False,
                                                         help=f"options of the {cls.name} reranker (key=value: "
                                                              f"rerank.{cls.name}.FIELD=...)")))
    return fields


_made: dict[tuple[tuple[str, type], ...], type] = {}


def rerank_config() -> type:
    """The rerank config class with a section for every reranker registered now (a plug-in's options included),
    made once per set of sections; :data:`RerankConfig` is the one made when this module was imported (the
    built-in rerankers and the installed plug-ins')."""
    from .base import RERANKERS

    RERANKERS.load_builtin()
    key = tuple((cls.name, cls.options) for cls in RERANKERS.values() if cls.options is not None)
    if key not in _made:
        cls = make_dataclass("RerankConfig", _family_fields(), bases=(PromptGuidedConfig,))
        cls.__module__ = __name__
        cls.__doc__ = PromptGuidedConfig.__doc__
        _made[key] = cls
    return _made[key]


class RerankSection:
    """The declared type of a config's ``rerank`` section (an experiment's): read as the rerank config of the
    rerankers registered when the config is read (:func:`pgra.core.config.section_type`), so a plug-in reranker's
    options are set from YAML like a built-in one's (``rerank.<name>.FIELD``)."""

    @classmethod
    def __section__(cls) -> type:
        return rerank_config()


RerankConfig = rerank_config()
