"""The experiment layer: the grid of tasks x methods x seeds over ``<out>/<task>/<method>/seed-<n>/``.

``config`` (ExperimentConfig, a cell's settings), ``layout`` (file names, keys, cell status), ``cell`` (one cell:
fit, predict, score, record) and ``grid`` (Experiment: plan and run the grid, resumable).
"""

from .config import ExperimentConfig, cell_settings
from .grid import Experiment
from .launch import run_experiment
from .layout import CELL_FILE, CellPlan

__all__ = ["CELL_FILE", "CellPlan", "Experiment", "ExperimentConfig", "cell_settings", "run_experiment"]
