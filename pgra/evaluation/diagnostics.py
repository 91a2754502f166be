"""What the selected demonstrations did, per cell: from the predictions' ``demo_labels`` and the cell's LM cost."""

from __future__ import annotations

from collections import Counter
from typing import Any


def demonstration_diagnostics(lines: list[dict[str, Any]], labels: list[str]) -> dict[str, Any] | None:
    """The three demonstration numbers of one predictions file; None when it records no demonstrations."""
    shown = [x for x in lines if x.get("demo_labels")]
    if not shown:
        return None
    counts = Counter(str(lab) for x in shown for lab in x["demo_labels"])
    total = sum(counts.values())
    agree = gold_in = 0
    for x in shown:
        c = Counter(str(lab) for lab in x["demo_labels"])
        top = max(c.values())
        agree += x["prediction"] is not None and c.get(str(x["prediction"]), 0) == top
        gold_in += x["label"] is not None and str(x["label"]) in c
    return {"inputs": len(shown), "demos_per_input": total / len(shown),
            "label_histogram": {lab: counts.get(lab, 0) / total for lab in labels},
            "majority_agreement": agree / len(shown), "gold_in_demos": gold_in / len(shown)}


def mean_of(dicts: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean over cells (seeds) of each number, histograms averaged label by label."""
    out: dict[str, Any] = {}
    for key, value in dicts[0].items():
        if isinstance(value, dict):
            out[key] = {k: sum(d[key][k] for d in dicts) / len(dicts) for k in value}
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = sum(d[key] for d in dicts) / len(dicts)
    return out


def format_histogram(hist: dict[str, float], top: int = 4) -> str:
    """``label 40%, other 25%, ...`` for the most frequent labels."""
    ranked = sorted(hist.items(), key=lambda kv: -kv[1])
    shown = [f"{lab} {100 * share:.0f}%" for lab, share in ranked[:top] if share > 0]
    rest = sum(1 for _, share in ranked[top:] if share > 0)
    return ", ".join(shown) + (f", +{rest} more" if rest else "")
