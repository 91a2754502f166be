"""Each demonstration strategy against a naive implementation of its paper's definition, on a hand-sized pool.

OpenICL's own retrievers are not the reference: openicl 0.1.8 pins transformers==4.28.1 and tokenizers==0.13.3
and needs nltk, openai, evaluate and faiss-gpu; installed beside pgra's dependencies without them
(``pip install openicl --no-deps``) its package fails to import (``No module named 'nltk'``), and with them it
would replace pgra's transformers (docs/selectors.md)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from pgra.selection import SelectorSettings, get_selector
from pgra.tasks import Example, get_task

TASK = get_task("sst2")
TEXTS = ["a fine film with a fine cast", "dull and slow", "the sun shines on the film", "rain all day long",
         "lovely music and a lovely film", "bad acting , bad plot", "great plot", "slow music", "a film",
         "the cast was great", "rain rain rain", "fine music"]
TRAIN = [Example(f"t{i}", t, "01"[i % 2]) for i, t in enumerate(TEXTS)]
QUERIES = [Example("q0", "a lovely film"), Example("q1", "rain and bad music"), Example("q2", "dull and slow"),
           Example("q3", "great fine cast")]
DIM = 6
VECTORS = {t: np.random.default_rng(zlib.crc32(t.encode())).normal(size=DIM) for t in TEXTS + [q.text for q in QUERIES]}


class FakeEncoder:
    """Stands in for CachedEncoder: fixed random vectors per text."""

    def __init__(self, settings, device=None, show_progress=False, loaded=None):
        self.encoder = type("E", (), {"fingerprint": "fake"})()

    def encode(self, texts, cache=True):
        return np.stack([VECTORS[t] for t in texts])


@pytest.fixture()
def fake_encoder(monkeypatch):
    import pgra.selection.encoded as encoded

    monkeypatch.setattr(encoded, "CachedEncoder", FakeEncoder)


def _unit(v):
    return np.asarray(v, np.float64) / np.linalg.norm(v)


def _cos(a, b):
    return float(_unit(a) @ _unit(b))


def _allowed(q):
    return [i for i, ex in enumerate(TRAIN) if ex.text.strip() != q.text.strip()]


def test_bm25_is_rank_bm25_okapi_top_m():
    from rank_bm25 import BM25Okapi

    bm = BM25Okapi([t.split(" ") for t in TEXTS])
    got = get_selector("bm25", 3).fit(TASK, TRAIN).select(QUERIES)
    for q, row in zip(QUERIES, got, strict=True):
        scores = bm.get_scores(q.text.split(" "))
        ranked = sorted(_allowed(q), key=lambda i: (-scores[i], i))[:3]
        assert row == ranked[::-1]  # the best next to the query
    assert 1 not in got[2]  # never the query itself (q2 is the text of training input 1)
    rev = get_selector("bm25", 3, settings=SelectorSettings(reverse=True)).fit(TASK, TRAIN).select(QUERIES)
    assert rev == [r[::-1] for r in got]


def _settings(**kw):
    return SelectorSettings(encoder="fake", **kw)


def _mmr_gain(q, i, chosen, lam):
    redundancy = max((_cos(VECTORS[TEXTS[i]], VECTORS[TEXTS[j]]) for j in chosen), default=0.0)
    return lam * _cos(VECTORS[q.text], VECTORS[TEXTS[i]]) - (1 - lam) * redundancy


def _logdet(kernel, rows):
    sign, value = np.linalg.slogdet(kernel[np.ix_(rows, rows)])
    return value if sign > 0 else -np.inf


def test_mmr_is_the_greedy_marginal_relevance(fake_encoder):
    for lam in (0.0, 0.3, 0.7, 1.0):
        got = get_selector("mmr", 4, settings=_settings(mmr_lambda=lam)).fit(TASK, TRAIN).select(QUERIES)
        for q, row in zip(QUERIES, got, strict=True):
            chosen: list[int] = []
            for _ in range(4):  # Carbonell and Goldstein's definition, written out
                gains = {i: _mmr_gain(q, i, chosen, lam) for i in _allowed(q) if i not in chosen}
                chosen.append(max(gains, key=lambda i: (gains[i], -i)))
            assert row == chosen[::-1], (lam, q.text)
    kate = get_selector("kate", 4, settings=_settings()).fit(TASK, TRAIN)
    assert get_selector("mmr", 4, settings=_settings(mmr_lambda=1.0)).fit(TASK, TRAIN).select(QUERIES) == \
        kate.select(QUERIES)  # relevance alone is KATE


def test_votek_is_su_et_al_selective_annotation_then_nearest(fake_encoder):
    k, pool, rho = 3, 5, 10.0
    sel = get_selector("votek", 2, settings=_settings(votek_k=k, votek_pool=pool, votek_rho=rho)).fit(TASK, TRAIN)
    n = len(TEXTS)
    knn = {v: sorted((u for u in range(n) if u != v), key=lambda u: (-_cos(VECTORS[TEXTS[v]], VECTORS[TEXTS[u]]),
                                                                     u))[:k] for v in range(n)}
    chosen: list[int] = []
    for _ in range(pool):  # Algorithm 1 of Su et al. 2022 (the graph stage)
        scores = {u: sum(rho ** -len([x for x in chosen if x in knn[v]]) for v in range(n)
                         if v not in chosen and v != u and u in knn[v]) for u in range(n) if u not in chosen}
        chosen.append(max(scores, key=lambda u: (scores[u], -u)))
    assert sel.pool == sorted(chosen) and sel.pool != list(range(pool))
    for q, row in zip(QUERIES, sel.select(QUERIES), strict=True):
        near = sorted((i for i in _allowed(q) if i in chosen), key=lambda i: (-_cos(VECTORS[q.text],
                                                                                    VECTORS[TEXTS[i]]), i))[:2]
        assert row == near[::-1]


def test_dpp_is_the_greedy_map_of_ceils_kernel(fake_encoder):
    cands, scale, m = 8, 0.2, 3
    got = get_selector("dpp", m, settings=_settings(dpp_candidates=cands, dpp_scale=scale)).fit(TASK, TRAIN)
    for q, row in zip(QUERIES, got.select(QUERIES), strict=True):
        near = sorted(_allowed(q), key=lambda i: (-_cos(VECTORS[q.text], VECTORS[TEXTS[i]]), i))[:cands]
        rel = np.array([(_cos(VECTORS[q.text], VECTORS[TEXTS[i]]) + 1) / 2 for i in near])
        r = np.exp((rel - rel.max()) / (2 * scale))
        kernel = np.array([[r[a] * _cos(VECTORS[TEXTS[i]], VECTORS[TEXTS[j]]) * r[b] for b, j in enumerate(near)]
                           for a, i in enumerate(near)])
        chosen: list[int] = []
        for _ in range(m):  # greedy MAP: the candidate that most increases log det L_S
            gains = {a: _logdet(kernel, [*chosen, a]) for a in range(cands) if a not in chosen}
            chosen.append(max(gains, key=lambda a: (gains[a], -a)))
        assert row == [near[a] for a in chosen][::-1], q.text
    kate = get_selector("kate", m, settings=_settings()).fit(TASK, TRAIN).select(QUERIES)
    assert got.select(QUERIES) != kate  # diversity changed some query's demonstrations


def _entropy(logp_row):
    p = np.exp(logp_row - max(logp_row))
    p = p / p.sum()
    return float(-(p * np.log(p)).sum())


def test_mdl_picks_the_candidate_set_of_least_label_entropy(fake_encoder, tiny_opt):
    from pgra.lm.label_scoring import LabelScorer
    from pgra.lm.prompts import build_prompt

    m, cands, samples = 2, 5, 4
    sel = get_selector("mdl", m, seed=3, settings=_settings(mdl_candidates=cands, mdl_samples=samples),
                       lm=str(tiny_opt)).fit(TASK, TRAIN)
    got = sel.select(QUERIES)
    naive = LabelScorer(str(tiny_opt))
    words = [TASK.demo_words[lab] for lab in TASK.labels]
    picked_a_drawn_set = False
    for i, (q, row) in enumerate(zip(QUERIES, got, strict=True)):
        near = sorted(_allowed(q), key=lambda j: (-_cos(VECTORS[q.text], VECTORS[TEXTS[j]]), j))[:cands]
        sets = sel.candidate_sets(q, np.array([_cos(VECTORS[q.text], VECTORS[t]) for t in TEXTS]))
        assert sets[0] == near[:m][::-1] and len(sets) == samples
        assert all(len(set(s)) == m and set(s) <= set(near) for s in sets)
        # Wu et al.'s codelength, in expectation over the LM's own labels: the label entropy of each prompt
        logp, _ = naive.score_naive([build_prompt(TASK, [TRAIN[j] for j in s], q.text) for s in sets], words)
        entropies = [_entropy(r) for r in logp]
        best = min(range(samples), key=lambda t: (round(entropies[t], 6), t))
        assert row == sets[best], (i, entropies)
        picked_a_drawn_set |= best > 0
    assert picked_a_drawn_set  # the LM's choice, not the nearest set alone
    assert sel.cost.lm_calls == len(QUERIES) * samples and sel.cost.lm_tokens > 0
    assert sel.select(QUERIES[::-1]) == got[::-1] and sel.cost.lm_calls == len(QUERIES) * samples  # once each
    assert get_selector("mdl", m, seed=3, settings=_settings(mdl_candidates=cands, mdl_samples=samples),
                        lm=str(tiny_opt)).fit(TASK, TRAIN).select(QUERIES) == got  # seeded
    sel.release()
    assert sel._scorer is None


def test_topk_cone_reranks_by_the_inputs_conditional_entropy(fake_encoder, tiny_opt):
    from pgra.lm.label_scoring import LabelScorer
    from pgra.lm.prompts import demo_prefix

    m, cands = 3, 6
    sel = get_selector("topk_cone", m, settings=_settings(cone_candidates=cands), lm=str(tiny_opt)).fit(TASK, TRAIN)
    got = sel.select(QUERIES)
    naive = LabelScorer(str(tiny_opt))
    reordered = False
    for q, row in zip(QUERIES, got, strict=True):
        near = sorted(_allowed(q), key=lambda j: (-_cos(VECTORS[q.text], VECTORS[TEXTS[j]]), j))[:cands]
        # -log p(x | c) / |x|: the input's rendering after the prompt holding c alone
        logp, counts = naive.score_naive([demo_prefix(TASK, [TRAIN[c]]) for c in near], [TASK.render(q.text)])
        ce = {c: -logp[a, 0] / counts[a, 0] for a, c in enumerate(near)}
        ranked = sorted(near, key=lambda c: (round(ce[c], 6), near.index(c)))[:m]
        assert row == ranked[::-1]
        reordered |= ranked != near[:m]
    assert reordered and sel.cost.lm_calls == len(QUERIES) * cands


@pytest.mark.parametrize("strategy,options", [("bm25", {}), ("mmr", {"mmr_lambda": 0.3}),
                                              ("votek", {"votek_pool": 6, "votek_k": 3}),
                                              ("dpp", {"dpp_candidates": 6}),
                                              ("mdl", {"mdl_candidates": 4, "mdl_samples": 2}),
                                              ("topk_cone", {"cone_candidates": 4})])
def test_each_strategy_runs_through_pgra_icl(strategy, options, candidates, tmp_path, tiny_opt, tiny_bert):
    """`pgra icl` with the strategy and its options as key=value: the predictions' demonstrations are the
    selector's, the LM-based strategies' work is in the run's cost."""
    import json

    from pgra.cli import main

    out = tmp_path / "icl"
    argv = ["icl", "--data", str(candidates), "--out", str(out), "--lm", str(tiny_opt), "--selection", strategy,
            "--num-demos", "2", "--demo-encoder", str(tiny_bert), "splits=test", "--no-show-progress",
            f"demos.cache_dir={tmp_path / 'sel'}", *(f"demos.{k}={v}" for k, v in options.items())]
    assert main(argv) == 0
    lines = [json.loads(x) for x in (out / "predictions_test.jsonl").read_text().splitlines()]
    train = [Example(str(r["id"]), r["text"], r["label"])
             for r in map(json.loads, (candidates / "train.jsonl").read_text().splitlines())]
    task = get_task(str(tmp_path / "sky.yaml"))
    settings = SelectorSettings(encoder=str(tiny_bert), cache_dir=str(tmp_path / "sel"), **options)
    want = get_selector(strategy, 2, seed=13, settings=settings, lm=str(tiny_opt)).fit(task, train).select_examples(
        [Example(str(x["id"]), x["text"]) for x in lines])
    assert [x["evidence"] for x in lines] == [[d.id for d in row] for row in want]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["selection"]["strategy"] == strategy
    lm_based = strategy in ("mdl", "topk_cone")
    assert (manifest["cost"]["selection"]["lm_calls"] > 0) == lm_based
