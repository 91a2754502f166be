"""Metrics, baselines and analyses."""
