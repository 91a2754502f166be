"""``AnalysisConfig``: the ``analysis:`` section of an experiment config, read by ``pgra analyze``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import option

ANALYSES = ("consistency", "sweep", "retrievers", "differences", "calibration", "leakage", "attribution", "cost", "case_study")


@dataclass
class ConsistencyConfig:
    """Pseudo-label consistency (the paper's Figure 2 / Table 10)."""

    labeller_seed: int = option(0, help="seed of the no_retrieval cell that labels the evidence (0 = first seed)")
    rerank_lms: list[str] = option(default_factory=list,
                                   help="more reranker LMs (paths or hub ids): each reranks the candidates again "
                                        "and its top d is labelled too (Table 10's OPT sizes)")
    batch_size: int = option(64, min=1, help="evidence sentences per labelling batch")


@dataclass
class SweepConfig:
    """PGRA with other k and d (the paper's Figures 4 and 5); the other value stays the experiment's."""

    k: list[int] = option(default_factory=lambda: [16, 50, 100, 150],
                          help="candidates reranked per input (at most the retrieved k)")
    d: list[int] = option(default_factory=lambda: [4, 8, 16, 24], help="evidence sentences the reader reads")
    seeds: list[int] = option(default_factory=list, help="seeds of each point (default: the experiment's)")


@dataclass
class CaseStudyConfig:
    """Inputs shown with every method's prediction and top evidence (the paper's Table 9)."""

    ids: list[str] = option(default_factory=list, help="input ids to show (default: n drawn at random)")
    n: int = option(5, min=1, help="inputs drawn at random when no ids are given")
    seed: int = option(0, help="seed of the random draw")
    top: int = option(3, min=1, help="evidence sentences shown per method")
    prefer_disagreement: bool = option(True, help="draw from the inputs where FiD and PGRA disagree when any do")


@dataclass
class CalibrationConfig:
    """Expected calibration error, Brier score, reliability diagrams and seed flips of every method."""

    n_bins: int = option(10, min=2, help="equal-width confidence bins of the calibration error and the diagrams")


@dataclass
class LeakageConfig:
    """Test and dev inputs with an exact or near duplicate in the retrieval corpus, and who read it."""

    threshold: float = option(0.95, min=0, max=1, help="cosine (index encoder) at or above which a corpus "
                                                       "sentence is a near duplicate of an input (dense indexes)")
    splits: list[str] = option(default_factory=lambda: ["dev", "test"], help="splits audited")
    examples: int = option(5, min=0, help="flagged inputs shown per task and split")


@dataclass
class AttributionConfig:
    """Leave-one-out effects of each evidence sentence on the gold label's probability (fid and pgra cells)."""

    n: int = option(200, min=0, help="inputs drawn (seeded) from the analysed split; 0 = all")
    seed: int = option(0, help="seed of the draw (the same inputs for every method and seed)")
    batch_size: int = option(64, min=1, help="reader inputs per batch (each input runs d + 2 times)")


@dataclass
class AnalysisConfig:
    """What ``pgra analyze`` computes for an experiment, next to its ``results.md``."""

    analyses: list[str] = option(default_factory=lambda: ["consistency", "differences", "case_study"],
                                 choices=ANALYSES, help="comma-separated analyses to run")
    split: str = option("test", choices=("dev", "test"), help="split the analyses read")
    consistency: ConsistencyConfig = option(default_factory=ConsistencyConfig, help="label consistency")
    sweep: SweepConfig = option(default_factory=SweepConfig, help="k and d sweeps of PGRA")
    retrievers: dict[str, Any] = option(
        default_factory=dict,
        help="first-stage retrievers compared with the experiment's: {name: {index settings}} (FiD and PGRA each)")
    calibration: CalibrationConfig = option(default_factory=CalibrationConfig, help="calibration of the scores")
    leakage: LeakageConfig = option(default_factory=LeakageConfig, help="leakage audit")
    attribution: AttributionConfig = option(default_factory=AttributionConfig, help="evidence attribution")
    case_study: CaseStudyConfig = option(default_factory=CaseStudyConfig, help="case study")
