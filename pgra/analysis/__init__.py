"""The analyses of an experiment (``pgra analyze``): label consistency, k and d sweeps, retrievers, where FiD and
PGRA differ, calibration, leakage, attribution, cost and a case study, as tables and PNG figures next to
``results.md``. One file per analysis, each registered (:mod:`pgra.analysis.base`)."""

from .base import ANALYSES, Analysis, register_analysis

__all__ = ["ANALYSES", "Analysis", "analyze", "register_analysis"]


def __getattr__(name: str):
    if name == "analyze":
        from .run import analyze

        return analyze
    raise AttributeError(name)
