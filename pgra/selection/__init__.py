"""In-context demonstration selection strategies (random / the paper's code; KATE and Skill-KNN plug in here)."""

from .strategies import STRATEGIES, DemoSelector, get_selector

__all__ = ["STRATEGIES", "DemoSelector", "get_selector"]
