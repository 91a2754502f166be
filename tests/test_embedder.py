import numpy as np
import pytest

from pgra.rerank.embedder import LMEmbedder
from pgra.rerank.prompts import ANSWER_CUE, build_prompt, demo_prefix
from pgra.tasks import Example, get_task
from tests.conftest import SENTENCES

TASK = get_task("sst2")
DEMOS = [Example("d0", "a gripping film .", "1"), Example("d1", "dull and slow .", "0"),
         Example("d2", "The music was lovely.", "1"), Example("d3", "It was the worst year of the war.", "0")]


def _naive(emb: LMEmbedder, texts):
    """The reference: every prompt alone, batch 1, no padding, no cache."""
    return emb.embed_full([build_prompt(TASK, DEMOS, t) for t in texts], batch_size=1)


def test_prefix_cache_matches_naive_reference(tiny_lm):
    emb = LMEmbedder(str(tiny_lm), max_tokens_per_batch=600, max_batch_size=5)
    texts = SENTENCES + ["short", "x " * 40]
    fast = emb.embed(texts, demo_prefix(TASK, DEMOS), TASK.render, ANSWER_CUE)
    ref = _naive(emb, texts)
    assert np.abs(fast - ref).max() < 1e-4
    np.testing.assert_allclose(np.linalg.norm(fast, axis=1), 1, atol=1e-5)
    assert emb.stats.uncached == 0


@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_full_prompts_any_padding_and_batch(tiny_opt, padding_side, batch_size):
    emb = LMEmbedder(str(tiny_opt))
    prompts = [build_prompt(TASK, DEMOS, t) for t in SENTENCES[:9]]
    got = emb.embed_full(prompts, batch_size=batch_size, padding_side=padding_side)
    assert np.abs(got - emb.embed_full(prompts, batch_size=1)).max() < 1e-4


def test_seam_tokenisation_is_joint(tiny_opt):
    emb = LMEmbedder(str(tiny_opt))
    prefix = demo_prefix(TASK, DEMOS)
    for t in SENTENCES[:5]:
        ids = emb.prompt_ids(prefix, TASK.render, ANSWER_CUE, t)
        assert ids == emb.tokenizer(build_prompt(TASK, DEMOS, t))["input_ids"]


def test_long_text_is_truncated_never_the_prefix_or_cue(tiny_opt):
    emb = LMEmbedder(str(tiny_opt), max_context=160)
    prefix = demo_prefix(TASK, DEMOS)
    long_text = " ".join(SENTENCES)
    ids = emb.prompt_ids(prefix, TASK.render, ANSWER_CUE, long_text)
    decoded = emb.tokenizer.decode(ids, skip_special_tokens=True)
    assert len(ids) <= 160 and emb.stats.truncated == 1
    assert decoded.startswith(prefix) and decoded.endswith(ANSWER_CUE)
    vec = emb.embed([long_text, "short"], prefix, TASK.render, ANSWER_CUE)
    assert vec.shape == (2, emb.dim)
    tiny = LMEmbedder(str(tiny_opt), max_context=20)
    with pytest.raises(Exception, match="prefix and answer cue alone"):
        tiny.prompt_ids(prefix, TASK.render, ANSWER_CUE, "text")


def test_the_template_head_is_shared_too(tiny_opt):
    """Only each text's own tokens, the template's tail and the cue run per text (plus the seam margin)."""
    from pgra.rerank.embedder import SEAM_BACKOFF, shared_head

    emb = LMEmbedder(str(tiny_opt))
    prefix = demo_prefix(TASK, DEMOS)
    head = emb.tokenizer(shared_head(prefix, TASK.render))["input_ids"]
    assert shared_head(prefix, TASK.render) == prefix + TASK.rerank_template.split("{text}")[0]
    assert len(head) > len(emb.tokenizer(prefix)["input_ids"]) + 5
    texts = SENTENCES[:6]
    emb.embed(texts, prefix, TASK.render, ANSWER_CUE)
    split = len(head) - SEAM_BACKOFF
    seqs = [emb.prompt_ids(prefix, TASK.render, ANSWER_CUE, t) for t in texts]
    assert emb.stats.uncached == 0 and emb.stats.tokens_run == split + sum(len(s) - split for s in seqs)
