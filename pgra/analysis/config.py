"""The ``analysis:`` section of an experiment config, built from the registered analyses, and ``AnalyzeConfig``:
the experiment config with that section typed (what ``pgra experiment`` and ``pgra analyze`` read)."""

from __future__ import annotations

from dataclasses import make_dataclass
from typing import Any

from ..core.config import from_dict, option, to_dict
from ..core.registry import HandedOver
from ..experiment import ExperimentConfig
from ..experiment.config import experiment_config

DEFAULT_ANALYSES = ["consistency", "differences", "case_study"]
_classes: dict[tuple[Any, ...], tuple[type, type]] = {}
# the registry the section is built from, handed over by the interface's module when it is imported (that
# module imports this one)
_registry: HandedOver[Any] = HandedOver("analyses", "pgra.analysis")
use_analyses = _registry.hand_over


def _classes_now() -> tuple[type, type]:
    analyses = _registry()
    base = experiment_config()  # with a section per plug-in method's options
    sections = (base, *((a.name, a.config, a.help, a.path_segment) for a in analyses.values() if a.config is not None))
    if sections not in _classes:
        fields: list[tuple[str, Any, Any]] = [
            ("analyses", list[str], option(default_factory=lambda: list(DEFAULT_ANALYSES),
                                           choices=analyses.names, help="comma-separated analyses to run")),
            ("split", str, option("test", choices=("dev", "test"), path_segment=True, help="split the analyses read"))]
        fields += [(name, tp, option(default_factory=analyses[name].default_options(), help=help_, path_segment=segment))
                   for name, tp, help_, segment in sections[1:]]
        analysis = make_dataclass("AnalysisConfig", fields)
        analysis.__module__ = __name__
        analysis.__doc__ = "What ``pgra analyze`` computes for an experiment, next to its ``results.md``."
        analyze = make_dataclass(
            "AnalyzeConfig", [("analysis", analysis, option(default_factory=analysis, flag=False,
                                                            help="what `pgra analyze` computes (key=value: "
                                                                 "analysis.FIELD=...)"))],
            bases=(base,))
        analyze.__module__, analyze.__doc__ = __name__, ExperimentConfig.__doc__
        _classes[sections] = (analysis, analyze)
    return _classes[sections]


def analysis_config() -> type:
    """The dataclass of the ``analysis:`` section for the analyses registered now."""
    return _classes_now()[0]


def analyze_config() -> type:
    """:class:`~pgra.experiment.ExperimentConfig` with its ``analysis`` section typed by the registered analyses."""
    return _classes_now()[1]


def as_analyze_config(cfg: ExperimentConfig) -> Any:
    """``cfg`` with its ``analysis`` section checked and typed (else read as a plain mapping)."""
    cls = analyze_config()
    return cfg if isinstance(cfg, cls) else from_dict(cls, to_dict(cfg), source="<experiment config>")


def __getattr__(name: str) -> type:
    if name == "AnalyzeConfig":
        return analyze_config()
    if name == "AnalysisConfig":
        return analysis_config()
    raise AttributeError(name)


__all__ = ["analysis_config", "analyze_config", "as_analyze_config"]
