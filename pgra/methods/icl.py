"""``icl``: in-context learning with a causal LM over selected demonstrations (random, KATE, Skill-KNN ...).

``icl`` uses the experiment's ``icl.selection``; ``icl_<strategy>`` pins one registered strategy (``icl_random``,
``icl_kate``, ``icl_skill_knn``, ``icl_bm25``, ``icl_mmr``, ``icl_votek`` ..., a plug-in strategy's too:
:func:`icl_method`), so one grid compares them as separate rows. The seed reaches random selections (and Skill-KNN's
shuffled rewrite prompts); a run the seed cannot change (KATE, Skill-KNN ``single``) is made once per task.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..results.predictions import Predictor
from ..stages import ModelNeed
from .base import FitResult, Method

if TYPE_CHECKING:
    from ..runtime.cost import Priced


class ICL(Method):
    name = "icl"
    data = "candidates"
    trained = False
    evidence = "training"  # the demonstrations
    evidence_in_prompt = True
    strategy: ClassVar[str | None] = None  # None: the config's icl.selection

    def config(self, out: Path, seed: int):
        s = self.inputs.settings
        return replace(s.icl, data=str(self.data_dir), out=str(out), seed=seed,
                       selection=self.strategy or s.icl.selection, show_progress=s.show_progress)

    def splits(self) -> tuple[str, ...]:
        """``icl.splits`` (nothing is trained, so dev is optional), always with test."""
        return tuple(dict.fromkeys([*self.inputs.settings.icl.splits, "test"]))

    def depends_on_seed(self) -> bool:
        """Only through the demonstration selection (the LM scores every label; nothing is sampled): random
        draws do; KATE and the code order do not; Skill-KNN does only when its m rewrites shuffle the annotated
        demonstrations with the seed (``Selector.uses_seed``). An unknown strategy counts as seeded."""
        from ..selection import STRATEGIES

        cfg = self.config(Path("."), 0)
        strategy = STRATEGIES.get(cfg.selection)
        return strategy is None or strategy.uses_seed(cfg.num_demos, cfg.demos)

    @classmethod
    def price(cls, fits: Any, settings: dict[str, Any], inputs: int | None, splits: dict[str, int] | None,
              disk: dict[str, Any] | None = None) -> Priced | None:
        """On a CPU: the fixed part of an in-context cell plus the inputs it predicts (its ``splits``), each at its
        demonstrations over the bench's (a prompt of m demonstrations and the input costs about m + 1 inputs')."""
        if fits.cpu_cells is None or splits is None:
            return None
        bench_demos = fits.cpu_cells.icl_demos
        predicted = sum(splits.get(str(name), 0) for name in settings.get("splits") or ["test"])
        demos = int((settings.get("icl") or {}).get("num_demos", bench_demos) or 0)
        return fits.cpu_price("icl", predicted, (demos + 1) / (bench_demos + 1))

    def models(self) -> list[ModelNeed]:
        icl = self.inputs.settings.icl
        return [ModelNeed("icl.lm", str(icl.lm), "in-context LM", icl.trust_remote_code)]

    def settings(self) -> dict[str, Any]:
        from ..icl.run import icl_settings

        return {"icl": icl_settings(self.config(Path("."), 0)), "splits": list(self.splits())}

    def fit(self, out: Path, seed: int) -> FitResult:
        """Run on the main process only (a multi-process launch waits for it): the selection's caches and the
        run folder have one writer."""
        from ..icl.run import run_icl
        from ..runtime.distributed import init_distributed, main_computes
        from ..storage.artifacts import read_json

        ctx = init_distributed()
        main_computes(ctx, lambda: run_icl(replace(self.config(out, seed), splits=list(self.splits()))))
        if not ctx.is_main:
            return FitResult()
        return FitResult(predicted_splits=list(self.splits()), cost=read_json(out / "manifest.json")["cost"])

    @classmethod
    def load(cls, out: Path, device: str | None = None, trust_remote_code: bool = False) -> Predictor:
        from ..icl.run import ICLPredictor

        return ICLPredictor(out, device=device, trust_remote_code=trust_remote_code)


def icl_method(strategy: str) -> type[ICL]:
    """The method ``icl_<strategy>``: in-context learning with the demonstration strategy ``strategy`` pinned."""
    return type(f"ICL_{strategy}", (ICL,), {"name": f"icl_{strategy}", "strategy": strategy, "__module__": __name__,
                                           "made_from": ("strategy", strategy),
                                           "__doc__": f"In-context learning with '{strategy}' demonstrations."})
