import numpy as np
import pytest
import torch

from pgra.lm.prompts import ANSWER_CUE, build_prompt, demo_prefix
from pgra.rerank.prompt_guided.embedder import LMEmbedder
from pgra.tasks import Example, get_task
from tests import numerics
from tests.conftest import SENTENCES

TASK = get_task("sst2")
DEMOS = [Example("d0", "a gripping film .", "1"), Example("d1", "dull and slow .", "0"),
         Example("d2", "The music was lovely.", "1"), Example("d3", "It was the worst year of the war.", "0")]


def _naive(emb: LMEmbedder, texts):
    """The reference: every prompt alone, batch 1, no padding, no cache."""
    return emb.embed_full([build_prompt(TASK, DEMOS, t) for t in texts], batch_size=1)


def test_prefix_cache_matches_naive_reference(tiny_lm):
    emb = LMEmbedder(str(tiny_lm), dtype="fp32", max_tokens_per_batch=600, max_batch_size=5)
    texts = SENTENCES + ["short", "x " * 40]
    fast = emb.embed(texts, demo_prefix(TASK, DEMOS), TASK.render, ANSWER_CUE)
    ref = _naive(emb, texts)
    assert fast.shape[1] == emb.dim == (16 if "opt-proj" in str(tiny_lm) else 32)  # OPT-350m's projected output
    numerics.assert_close(fast, ref, depth=numerics.TINY_MODEL)
    numerics.assert_close(np.linalg.norm(fast, axis=1), np.ones(len(fast)), depth=64)  # unit rows
    assert emb.stats.uncached == 0
    assert emb._prefix_attention is True  # every test architecture takes the shared-prefix attention


def test_a_model_the_shared_prefix_attention_does_not_match_falls_back_exactly(tiny_opt, monkeypatch):
    from pgra.rerank.prompt_guided import prefix_attention

    def wrong(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
        return torch.zeros_like(query).transpose(1, 2), None

    monkeypatch.setattr(prefix_attention, "shared_prefix_attention", wrong)
    emb = LMEmbedder(str(tiny_opt), dtype="fp32", max_tokens_per_batch=600, max_batch_size=5)
    fast = emb.embed(SENTENCES, demo_prefix(TASK, DEMOS), TASK.render, ANSWER_CUE)
    assert emb._prefix_attention is False
    numerics.assert_close(fast, _naive(emb, SENTENCES), depth=numerics.TINY_MODEL)


@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_full_prompts_any_padding_and_batch(tiny_opt, padding_side, batch_size):
    emb = LMEmbedder(str(tiny_opt), dtype="fp32")
    prompts = [build_prompt(TASK, DEMOS, t) for t in SENTENCES[:9]]
    got = emb.embed_full(prompts, batch_size=batch_size, padding_side=padding_side)
    numerics.assert_close(got, emb.embed_full(prompts, batch_size=1), depth=numerics.TINY_MODEL)


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
    """Only each text's own tokens, the template's tail and the cue run per text: the token floor."""
    from pgra.rerank.prompt_guided.embedder import shared_head

    emb = LMEmbedder(str(tiny_opt))
    prefix = demo_prefix(TASK, DEMOS)
    head = emb.tokenizer(shared_head(prefix, TASK.render))["input_ids"]
    assert shared_head(prefix, TASK.render) == prefix + TASK.rerank_template.split("{text}")[0]
    assert len(head) > len(emb.tokenizer(prefix)["input_ids"]) + 5
    texts = SENTENCES[:6]
    emb.embed(texts, prefix, TASK.render, ANSWER_CUE)
    seqs = [emb.prompt_ids(prefix, TASK.render, ANSWER_CUE, t) for t in texts]
    assert all(s[: len(head)] == head for s in seqs)
    assert emb.stats.uncached == 0 and emb.stats.tokens_run == len(head) + sum(len(s) - len(head) for s in seqs)


def test_seam_groups_take_the_longest_matching_split():
    from pgra.rerank.prompt_guided.embedder import SEAM_BACKOFF, seam_groups

    head = list(range(10, 20))
    seqs = [head + [1, 2],                      # the whole head, then its own tokens
            head[:8] + [99, 2],                 # the tokenizer merged the head's last two tokens with the text
            head[:9] + [98],
            head[:10 - SEAM_BACKOFF - 1] + [7], # merged further back than the margin: run whole
            head]                               # nothing after the head: its last token runs
    groups, fallback = seam_groups(seqs, head)
    assert groups == {10: [0], 8: [1], 9: [2, 4]} and fallback == [3]


def test_texts_merging_across_the_seam_continue_from_a_shorter_head_and_stay_exact(tiny_opt):
    """A head ending mid-word ("... posit" + "ive"): those texts split earlier, from a slice of the same cache."""
    from pgra.rerank.prompt_guided.embedder import seam_groups, shared_head

    emb = LMEmbedder(str(tiny_opt), dtype="fp32")
    prefix = demo_prefix(TASK, DEMOS)
    render = lambda t: "The answer is posit" + t  # noqa: E731
    texts = ["ive .", " dull film .", "ive and slow .", " x", " a gripping film ."]
    seqs = [emb.prompt_ids(prefix, render, ANSWER_CUE, t) for t in texts]
    head = emb.ids(shared_head(prefix, render))
    groups, fallback = seam_groups(seqs, head)
    assert len(groups) == 2 and len(head) in groups and not fallback  # both kinds occur
    fast = emb.embed(texts, prefix, render, ANSWER_CUE)
    assert emb.stats.tokens_run == max(groups) + sum(len(seqs[i]) - n for n, m in groups.items() for i in m)
    numerics.assert_close(fast, emb.embed_full(seqs, batch_size=1), depth=numerics.TINY_MODEL)
