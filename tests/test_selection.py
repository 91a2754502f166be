"""Demonstration selection: each strategy on small hand-checked examples (order and the never-itself rule)."""

import hashlib
import json
import warnings

import numpy as np
import pytest

from pgra.core.errors import InputError
from pgra.selection import STRATEGIES, SelectorSettings, get_selector
from pgra.selection.rewrite import Rewrite, SkillRewriter, read_annotations
from pgra.selection.skill_knn import skill_similarities
from pgra.tasks import Example, get_task
from tests import numerics

TASK = get_task("sst2")
TRAIN = [Example("a", "alpha", "1"), Example("b", "bravo", "1"), Example("c", "charlie", "0"),
         Example("d", "delta", "0"), Example("e", "echo", "0")]
# hand-made 2-d vectors: cosine to the query "q" ranks a > b > c > d > e; "near" points along a but is short
VECTORS = {"alpha": (1.0, 0.0), "bravo": (0.9, 0.3), "charlie": (0.5, 0.8), "delta": (0.0, 1.0), "echo": (-1.0, 0.0),
           "q": (1.0, 0.05), "near": (0.2, 0.0), "b twin": (0.9, 0.3)}


class FakeEncoder:
    """Stands in for CachedEncoder: fixed vectors per text."""

    calls = 0

    def __init__(self, settings, device=None, show_progress=False, loaded=None):
        self.encoder = type("E", (), {"fingerprint": "fake"})()

    def encode(self, texts, cache=True):
        FakeEncoder.calls += 1
        return np.array([VECTORS[t] for t in texts], dtype=np.float32)


@pytest.fixture()
def fake_encoder(monkeypatch):
    import pgra.selection.encoded as encoded
    import pgra.selection.skill_knn as skill_knn

    monkeypatch.setattr(encoded, "CachedEncoder", FakeEncoder)
    monkeypatch.setattr(skill_knn, "CachedEncoder", FakeEncoder)
    return FakeEncoder


def _ids(selector, queries):
    return [[selector.train[i].id for i in row] for row in selector.select(queries)]


def test_registry_holds_every_strategy():
    assert set(STRATEGIES) >= {"paper", "code", "random", "kate", "skill_knn", "bm25", "mmr", "votek", "dpp"}
    assert not STRATEGIES["paper"].per_query and STRATEGIES["kate"].per_query
    with pytest.raises(InputError, match="unknown demonstration selection"):
        get_selector("nearest")


def test_kate_order_metric_and_never_itself(fake_encoder):
    s = SelectorSettings(encoder="fake")
    kate = get_selector("kate", 3, settings=s).fit(TASK, TRAIN)
    q = Example("q1", "q")
    assert _ids(kate, [q]) == [["c", "b", "a"]]  # most similar last, next to the query
    rev = get_selector("kate", 3, settings=SelectorSettings(encoder="fake", reverse=True)).fit(TASK, TRAIN)
    assert _ids(rev, [q]) == [["a", "b", "c"]]
    # never itself: identical text under any id; a shared id alone (splits numbered from 0) excludes nothing
    assert _ids(kate, [Example("a", "q")]) == [["c", "b", "a"]]
    assert _ids(kate, [Example("zz", "bravo")]) == [["d", "c", "a"]]
    # negative Euclidean distance on raw vectors: a short vector along "alpha" is nearer bravo than alpha
    euc = get_selector("kate", 2, settings=SelectorSettings(encoder="fake", metric="euclidean")).fit(TASK, TRAIN)
    cos = get_selector("kate", 2, settings=s).fit(TASK, TRAIN)
    assert _ids(cos, [Example("n", "near")]) == [["b", "a"]]  # cosine: a (1.0) > b (0.95)
    assert _ids(euc, [Example("n", "near")]) == [["a", "b"]]  # |near-b| = 0.76 < |near-a| = 0.8


def test_kate_with_a_real_encoder_matches_brute_force_and_caches(tiny_bert, tmp_path):
    from pgra.retrieval.encoder import DenseEncoder
    from tests.conftest import SENTENCES

    train = [Example(str(i), t, "1" if i % 2 else "0") for i, t in enumerate(SENTENCES[:12])]
    queries = [Example(f"q{i}", t) for i, t in enumerate(SENTENCES[12:16])] + [Example("dup", SENTENCES[3])]
    s = SelectorSettings(encoder=str(tiny_bert), pooler="mean", cache_dir=str(tmp_path))
    kate = get_selector("kate", 4, settings=s).fit(TASK, train)
    got = kate.select(queries)
    enc = DenseEncoder(str(tiny_bert), pooler="mean", max_length=128)
    sims = enc.encode([q.text for q in queries]) @ enc.encode([t.text for t in train]).T
    for row, q, sim in zip(got, queries, sims, strict=True):
        ranked = [i for i in np.argsort(-sim, kind="stable") if train[i].text != q.text][:4]
        assert row == list(reversed(ranked)), (row, ranked, sim[ranked])
    assert 3 not in got[-1]  # the duplicate of training text 3 never selects it
    cached = list((tmp_path / "encoded").glob("*/vectors.npy"))
    assert len(cached) == 1
    again = get_selector("kate", 4, settings=s).fit(TASK, train)
    np.testing.assert_array_equal(again.train_vectors, kate.train_vectors)


def test_random_is_per_query_seeded_balanced_and_never_itself():
    task = get_task("sst5")
    train = [Example(str(i), f"t{i}", str(i % 5)) for i in range(40)]
    r = get_selector("random", 5, seed=3).fit(task, train)
    queries = [Example(str(i), f"t{i}") for i in range(10)] + [Example("new", "t7")]
    rows = r.select(queries)
    assert all(len(row) == 5 and len(set(row)) == 5 for row in rows)
    for q, row in zip(queries, rows, strict=True):
        assert all(train[i].id != q.id and train[i].text != q.text for i in row)
    assert rows[:10] != [rows[0]] * 10  # each query draws its own
    assert r.select(list(reversed(queries))) == list(reversed(rows))  # a query's draw depends on its text only
    assert r.select([Example("other-id", "t3")]) == [rows[3]]  # e.g. a raw text given to a saved run
    assert get_selector("random", 5, seed=4).fit(task, train).select(queries) != rows
    bal = get_selector("random", 5, seed=3, settings=SelectorSettings(balanced=True)).fit(task, train)
    for row in bal.select(queries):
        assert sorted(train[i].label for i in row) == ["0", "1", "2", "3", "4"]
    with pytest.raises(InputError, match="more than the 40 labelled"):
        get_selector("random", 41).fit(task, train)


def test_skill_similarity_variants_by_hand():
    # two rewrites per side, 2-d embeddings
    q = np.array([[[1.0, 0.0]], [[0.0, 1.0]]])                     # (rewrites=2, queries=1, dim)
    t = np.array([[[1.0, 0.0], [0.6, 0.8]], [[1.0, 0.0], [0.6, 0.8]]])  # (2, train=2, dim)
    numerics.assert_close(skill_similarities(q, t, "single"), [[1.0, 0.6]], dtype="float64", depth=4)
    # consistency: cos(mean q = (.5,.5), mean t) -> t0 (1,0): .7071; t1 (.6,.8): (.3+.4)/(.7071*1) = .98995
    assert skill_similarities(q, t, "consistency").tolist() == [[pytest.approx(0.70711, abs=1e-5), pytest.approx(0.98995, abs=1e-5)]]  # numerics: 5 decimals
    # distinctiveness: max over pairs -> t0: 1.0 (q0 . t0), t1: .8 (q1 . t1)
    numerics.assert_close(skill_similarities(q, t, "distinctiveness"), [[1.0, 0.8]], dtype="float64", depth=4)


SKILLS = {"alpha": "delta", "bravo": "alpha", "charlie": "echo", "delta": "charlie", "echo": "bravo", "q": "alpha"}


def _annotations(tmp_path, lines=None):
    path = tmp_path / "skills.jsonl"
    lines = lines if lines is not None else [{"input": "a fine film", "skill": "judging sentiment"},
                                             {"input": "the cat sat", "skill": "reading a plain statement"}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_skill_knn_selects_by_the_rewrites(tmp_path, monkeypatch, fake_encoder):
    """The LM's rewrites (faked: alpha->delta ...) decide; the raw texts do not."""
    seen = []

    def fake_generate(self, prompts):
        seen.extend(prompts)
        return [Rewrite(SKILLS[p.rsplit("Sentence: ", 1)[1].split("\n")[0]], 10, 3) for p in prompts]

    monkeypatch.setattr(SkillRewriter, "_generate", fake_generate)
    monkeypatch.setattr("pgra.selection.rewrite.model_fingerprint", lambda lm: "fake-lm")
    s = SelectorSettings(encoder="fake", annotations=str(_annotations(tmp_path)), cache_dir=str(tmp_path / "c"))
    sk = get_selector("skill_knn", 2, settings=s, lm="some-lm").fit(TASK, TRAIN)
    # query "q" rewrites to "alpha": rewrites of the training set are a->delta b->alpha c->echo d->charlie e->bravo
    assert _ids(sk, [Example("q1", "q")]) == [["e", "b"]]  # by rewrite: b (alpha) most similar, then e (bravo)
    assert _ids(sk, [Example("zz", "bravo")]) == [["d", "e"]]  # never itself (b's text; its rewrite is cached)
    assert seen[0].startswith(s.instruction + "\n\nSentence: a fine film\nSkill: judging sentiment\n\n")
    assert sorted(p.rsplit("\n\n", 1)[1] for p in seen) == sorted(
        f"Sentence: {t}\nSkill:" for t in ["alpha", "bravo", "charlie", "delta", "echo", "q"])
    assert sk.cost.lm_calls == 5 + 1 and sk.cost.lm_tokens == 6 * 13
    sk.select([Example("q1", "q"), *TRAIN[:2]])  # rewrites it already made (or read) cost nothing again
    assert sk.cost.lm_calls == 5 + 1 and sk.cost.lm_tokens == 6 * 13
    # cached: a new selector generates nothing and counts the recorded cost
    seen.clear()
    sk2 = get_selector("skill_knn", 2, settings=s, lm="some-lm").fit(TASK, TRAIN)
    assert seen == [] and sk2.cost.rewrites_cached == 5 and sk2.cost.lm_tokens == 5 * 13
    # m shuffled rewrites: prompts of variant 0 keep file order, the others a seeded shuffle
    many = SkillRewriter("x", read_annotations(_annotations(tmp_path, [{"input": f"i{k}", "skill": f"s{k}"}
                                                                      for k in range(6)])), "I", cache_dir=tmp_path)
    assert [a.input for a in many.order(0)] == [f"i{k}" for k in range(6)]
    assert many.order(1) != many.order(0) and many.order(1) == many.order(1)


def test_rewrite_cache_survives_a_torn_line_and_empty_rewrites_fall_back(tmp_path, monkeypatch):
    monkeypatch.setattr("pgra.selection.rewrite.model_fingerprint", lambda lm: "fake-lm")
    monkeypatch.setattr(SkillRewriter, "_generate", lambda self, prompts: [Rewrite("", 5, 1) for _ in prompts])
    rw = SkillRewriter("lm", read_annotations(_annotations(tmp_path)), "I", cache_dir=tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = rw.rewrite(["one", "two"])
    assert [r.text for r in out] == ["one", "two"] and rw.empty == 2
    assert sum("came back empty" in str(w.message) for w in caught) == 1  # warned once
    with open(rw.path, "a") as f:
        f.write('{"key": "torn')  # a run killed mid-write
    rw2 = SkillRewriter("lm", read_annotations(_annotations(tmp_path)), "I", cache_dir=tmp_path)
    assert len(rw2.cache) == 2 and rw2.path.read_text().endswith("\n")


def test_bad_annotation_files_name_file_and_line(tmp_path):
    with pytest.raises(InputError, match=r"skills.jsonl.*no annotated demonstrations"):
        read_annotations(_annotations(tmp_path, []))
    with pytest.raises(InputError, match=r"skills.jsonl:2 \(field 'skill'\)"):
        read_annotations(_annotations(tmp_path, [{"input": "a", "skill": "b"}, {"input": "c"}]))
    with pytest.raises(InputError, match="annotated"):
        get_selector("skill_knn", 2, settings=SelectorSettings(encoder="x"), lm="y").fit(TASK, TRAIN)


def test_real_skill_rewrites_with_a_tiny_lm(tiny_opt, tmp_path):
    rw = SkillRewriter(str(tiny_opt), read_annotations(_annotations(tmp_path)), "I", max_new_tokens=6, batch_size=2,
                       cache_dir=tmp_path)
    out = rw.rewrite(["a gripping film .", "dull and slow .", "The music was lovely."])
    assert len(out) == 3 and all("\n" not in r.text and r.text for r in out)
    assert all(r.new_tokens <= 6 and r.prompt_tokens > 20 for r in out)
    again = SkillRewriter(str(tiny_opt), read_annotations(_annotations(tmp_path)), "I", max_new_tokens=6,
                          cache_dir=tmp_path).rewrite(["dull and slow ."])
    assert again[0].cached and again[0].text == out[1].text


def test_cached_greedy_rewrites_equal_plain_generation(tiny_lm, tmp_path):
    """The shared-head KV cache changes nothing: each rewrite equals transformers' greedy generate on its prompt."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rw = SkillRewriter(str(tiny_lm), read_annotations(_annotations(tmp_path)), "I", max_new_tokens=5, batch_size=3, dtype="fp32",
                       cache_dir=tmp_path)
    texts = ["a gripping film .", "dull and slow .", "The music was lovely.", "It rained."]
    got = rw.rewrite(texts)
    tok = AutoTokenizer.from_pretrained(str(tiny_lm))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_lm)).eval()
    for text, r in zip(texts, got, strict=True):
        ids = tok(rw.prompt(text), return_tensors="pt")["input_ids"]
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False,
                                 pad_token_id=tok.pad_token_id)
        want = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True).split("\n")[0].strip()
        assert r.text == (want or text.strip())


def test_rewrites_in_another_precision_are_cached_apart(tmp_path, monkeypatch):
    """A bf16 rewrite is not an fp32 one: the cache keeps them apart (fp32's keys as before)."""
    monkeypatch.setattr("pgra.selection.rewrite.model_fingerprint", lambda lm: "fake-lm")
    made: list[str] = []

    def generate(self, prompts):
        made.extend(prompts)
        return [Rewrite(f"{self.dtype}-skill", 5, 1) for _ in prompts]

    monkeypatch.setattr(SkillRewriter, "_generate", generate)
    ann = read_annotations(_annotations(tmp_path))
    fp32 = SkillRewriter("lm", ann, "I", cache_dir=tmp_path, device="cpu", dtype="fp32")
    assert fp32._key("p") == hashlib.sha256(b"32\x00p").hexdigest()  # the key fp32 rewrites always had
    assert [r.text for r in fp32.rewrite(["one"])] == ["fp32-skill"]
    bf16 = SkillRewriter("lm", ann, "I", cache_dir=tmp_path, device="cpu", dtype="bf16")
    assert [r.text for r in bf16.rewrite(["one"])] == ["bf16-skill"] and len(made) == 2  # not fp32's from the cache
    again = SkillRewriter("lm", ann, "I", cache_dir=tmp_path, device="cpu", dtype="auto")  # fp32 on CPU
    assert [(r.text, r.cached) for r in again.rewrite(["one"])] == [("fp32-skill", True)] and len(made) == 2
