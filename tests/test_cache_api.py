"""pgra's KV-cache paths pass a cache under the name the installed transformers expects (``cache`` in 5.x,
``past_key_values`` in 4.x) and read it back the same way: no deprecation warning is raised by pgra's own calls
(a filter hides nothing here: every warning is recorded) and the output's deprecated alias is never read."""

from __future__ import annotations

import warnings

import pytest

from pgra.lm.label_scoring import LabelScorer
from pgra.lm.prompts import ANSWER_CUE, build_prompt, demo_prefix
from pgra.rerank.prompt_guided.embedder import LMEmbedder
from tests.conftest import SENTENCES
from tests.test_embedder import DEMOS, TASK


@pytest.fixture()
def no_alias(monkeypatch):
    """Fail on any read of transformers 5's deprecated ``output.past_key_values`` alias (it logs once a process,
    so a log check would miss it after the first test)."""
    from transformers.utils import generic

    if isinstance(getattr(generic.ModelOutput, "past_key_values", None), property):  # 5.x
        def alias(self):
            raise AssertionError("read the deprecated output.past_key_values")
        monkeypatch.setattr(generic.ModelOutput, "past_key_values", property(alias))


def _deprecations(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning))
            and ("past_key_values" in str(w.message) or "cache" in str(w.message))]


def test_cached_paths_raise_no_cache_deprecation(tiny_lm, no_alias):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        emb = LMEmbedder(str(tiny_lm), dtype="fp32")
        emb.embed(SENTENCES[:5], demo_prefix(TASK, DEMOS), TASK.render, ANSWER_CUE)  # the shared prefix's cache
        scorer = LabelScorer(str(tiny_lm), dtype="fp32", max_tokens_per_batch=500, max_batch_size=3)
        scorer.score([build_prompt(TASK, DEMOS[:2], t) for t in SENTENCES[:4]],
                     ["positive", "quite unexpectedly wonderful"])  # a multi-token word continues from the cache
    assert _deprecations(caught) == []
