"""``pgra icl``: in-context learning with selected demonstrations (random, KATE, Skill-KNN ...)."""

from __future__ import annotations

from .command import Command


def run(cfg) -> None:
    from ..icl.run import run_icl

    for split, r in run_icl(cfg).items():
        print(f"{split}: " + ", ".join(f"{k} {v:.4f}" for k, v in r.items() if isinstance(v, float))
              + f" ({r['examples']} examples)")
    print(f"predictions: {cfg.out}/predictions_<split>.jsonl (demonstration ids in 'evidence')")


COMMAND = Command("icl", "in-context learning: causal LM + selected demonstrations, label-word scoring",
                  "pgra.icl.config:ICLConfig", run, writes="out")
