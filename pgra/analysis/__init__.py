"""The paper's analyses of an experiment (``pgra analyze``): label consistency, k and d sweeps, retrievers,
where FiD and PGRA differ, and a case study, as tables and PNG figures next to ``results.md``."""

from .config import ANALYSES, AnalysisConfig

__all__ = ["ANALYSES", "AnalysisConfig", "analyze"]


def __getattr__(name: str):
    if name == "analyze":
        from .run import analyze

        return analyze
    raise AttributeError(name)
