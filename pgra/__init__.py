"""pgra: Prompt-Guided Retrieval Augmentation for non-knowledge-intensive text classification.

The public API: one function per stage with its config dataclass, and the objects behind them.

    import pgra
    index = pgra.Index("indexes/demo-minilm")                      # stage 1: search a built index
    print(index.search_hits(["The planet orbits the sun"], k=3)[0])

    reader = pgra.Reader.load("runs/wiki_topic/demo/reader")       # stage 3: a trained FiD reader
    print(reader.predict([{"id": "q1", "text": "The planet orbits the sun", "ctxs": []}])[0])

    cfg = pgra.load_config(pgra.RerankConfig, "configs/demo/rerank_smollm2.yaml", {"top_d": 4})
    pgra.rerank(cfg)                                               # any stage, from Python
    top = pgra.PromptGuidedReranker.load(cfg.out, index.corpus).rerank(texts, hits)  # in memory (hits: index.search_hits)

    pipe = pgra.Pipeline.load("runs/demo-experiment/mr/pgra/seed-1")   # an experiment's run (`make demo`)
    print(pipe.predict(["A warm, funny and beautifully acted film."])[0])   # label, probabilities, evidence

Names are imported on first use, so ``import pgra`` (and ``pgra -h``) stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    # configs
    "load_config": "pgra.core.config",
    "IndexConfig": "pgra.retrieval.config",
    "RetrieveConfig": "pgra.retrieval.retrieve",
    "RerankConfig": "pgra.rerank.config",
    "TrainConfig": "pgra.reader.config",
    # stage functions
    "build_index": "pgra.retrieval.build",
    "retrieve": "pgra.retrieval.candidates_stage",
    "rerank": "pgra.rerank.stages",
    "train": "pgra.reader.train",
    # tasks
    "get_task": "pgra.tasks",
    "list_tasks": "pgra.tasks",
    "load_task": "pgra.tasks",
    "TaskSpec": "pgra.tasks",
    # stage 1
    "Index": "pgra.retrieval.index",
    "Retriever": "pgra.retrieval.base",
    "register_retriever": "pgra.retrieval.base",
    "RETRIEVERS": "pgra.retrieval",
    "DenseEncoder": "pgra.retrieval.encoder",
    # stage 2
    "LMEmbedder": "pgra.rerank.prompt_guided.embedder",
    "build_prompt": "pgra.lm.prompts",
    "demo_prefix": "pgra.lm.prompts",
    "ANSWER_CUE": "pgra.lm.prompts",
    "score_candidates": "pgra.rerank.prompt_guided.scoring",
    "PromptGuidedReranker": "pgra.rerank.prompt_guided.in_memory",
    "Reranker": "pgra.rerank.base",
    "RERANKERS": "pgra.rerank.base",
    "register_reranker": "pgra.rerank.base",
    # demonstration selection and in-context learning
    "get_selector": "pgra.selection",
    "SelectorSettings": "pgra.selection",
    "STRATEGIES": "pgra.selection",
    "ICLConfig": "pgra.icl.config",
    "run_icl": "pgra.icl.run",
    "LabelScorer": "pgra.lm.label_scoring",
    # stage 3
    "Reader": "pgra.reader.predict",
    "FiDReader": "pgra.reader.fid",
    # experiments
    "ExperimentConfig": "pgra.experiment",
    "Experiment": "pgra.experiment",
    "run_experiment": "pgra.experiment",
    "METHODS": "pgra.methods",
    "load_run": "pgra.methods",
    "write_report": "pgra.evaluation.report",
    "evaluate_run": "pgra.evaluation.evaluate",
    "Pipeline": "pgra.serving.pipeline",
    "export_run": "pgra.serving.export",
    "load_targets": "pgra.evaluation.targets",
    # formats
    "read_fid": "pgra.data.interchange",
    "write_fid": "pgra.data.interchange",
    # errors
    "PgraError": "pgra.core.errors",
    "InputError": "pgra.core.errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pgra' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
