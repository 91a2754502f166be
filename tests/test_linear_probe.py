"""``linear_probe`` against a hand computation: mean-pooled unit embeddings, standardised, scikit-learn's
logistic regression per C, the best C on dev, and predict_proba's probabilities."""

import json

import numpy as np
import pytest
import torch

from pgra.core.config import from_dict, to_dict
from pgra.core.errors import InputError
from pgra.experiment import ExperimentConfig
from pgra.methods import METHODS, RUN_KINDS, MethodInputs, load_run
from pgra.methods.linear_probe import LinearProbe, probabilities
from pgra.storage.artifacts import write_manifest
from tests import numerics
from tests.conftest import SENTENCES, TASK


def _hand_embed(model_dir, texts):
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(str(model_dir)), AutoModel.from_pretrained(str(model_dir)).eval()
    rows = []
    with torch.no_grad():
        for t in texts:  # one at a time: no padding at all
            enc = tok(t, return_tensors="pt", truncation=True, max_length=64)
            v = model(**enc).last_hidden_state[0].mean(0)
            rows.append((v / v.norm()).numpy())
    return np.stack(rows)


def _write(folder, split, rows):
    (folder / f"{split}.jsonl").write_text("".join(json.dumps({"id": f"{split}{i}", "text": t, "label": y}) + "\n"
                                                   for i, (t, y) in enumerate(rows)))


@pytest.fixture()
def probe_data(tmp_path):
    data = tmp_path / "cands"
    data.mkdir()
    rows = [(s, "sky" if any(w in s for w in ("sun", "moon", "star", "planet", "orbit", "Light")) else "town")
            for s in SENTENCES]
    _write(data, "train", rows[:12])
    _write(data, "dev", rows[12:16] + rows[:2])
    _write(data, "test", rows[16:] + rows[2:5])
    write_manifest(data, {"kind": "candidates", "task": to_dict(TASK)})
    return data


def test_linear_probe_equals_a_hand_computation(probe_data, tmp_path, tiny_bert):
    from sklearn.linear_model import LogisticRegression

    grid = [0.05, 1.0, 20.0]
    settings = from_dict(ExperimentConfig, {"index": {"out": "unused", "dense": {"encoder": str(tiny_bert),
                                                                                  "pooler": "mean", "max_length": 64}},
                                            "linear_probe": {"c_grid": grid}, "show_progress": False})
    method = LinearProbe(MethodInputs(TASK, probe_data, settings))
    assert not method.depends_on_seed() and "linear_probe" in METHODS and "linear_probe" in RUN_KINDS
    run = tmp_path / "probe" / "seed-1"
    method.fit(run, seed=1)

    load = [json.loads(x) for x in (probe_data / "train.jsonl").read_text().splitlines()]
    dev = [json.loads(x) for x in (probe_data / "dev.jsonl").read_text().splitlines()]
    test = [json.loads(x) for x in (probe_data / "test.jsonl").read_text().splitlines()]
    xtr, xdev, xte = (_hand_embed(tiny_bert, [r["text"] for r in rs]) for rs in (load, dev, test))
    mean, std = xtr.mean(0), xtr.std(0)
    best, best_acc = None, -1.0
    for c in grid:
        model = LogisticRegression(C=c, max_iter=2000).fit((xtr - mean) / std, [r["label"] for r in load])
        acc = float(np.mean(model.predict((xdev - mean) / std) == np.array([r["label"] for r in dev])))
        if acc > best_acc:
            best, best_acc = (c, model), acc
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["c"] == best[0] and manifest["dev_scores"][repr(best[0])] == best_acc  # exact: one count divided alike
    expected = best[1].predict_proba((xte - mean) / std)

    lines = load_run(run).predict(test)
    got = np.array([[line["scores"][c] for c in best[1].classes_] for line in lines])
    numerics.assert_close(got, expected, depth=numerics.MINILM, scale=1)
    assert [line["prediction"] for line in lines] == list(best[1].classes_[expected.argmax(1)])
    assert all(line["evidence"] == [] for line in lines)
    assert not list(run.glob("*.pkl")) and (run / "probe.safetensors").exists()


def test_probabilities_match_scikit_learn_for_three_classes():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 5))
    y = np.array(["a", "b", "c"])[(x[:, 0] > 0).astype(int) + (x[:, 1] > 0.5).astype(int)]
    model = LogisticRegression(C=3.0, max_iter=500).fit(x, y)
    numerics.assert_close(probabilities(x, model.coef_, model.intercept_), model.predict_proba(x), dtype="float64", depth=64)


def test_linear_probe_refuses_bad_settings(probe_data, tmp_path):
    bm25 = from_dict(ExperimentConfig, {"index": {"out": "unused", "retriever": "bm25"}, "show_progress": False})
    with pytest.raises(InputError, match="linear_probe.encoder"):
        LinearProbe(MethodInputs(TASK, probe_data, bm25)).fit(tmp_path / "a", 1)
    bad = from_dict(ExperimentConfig, {"index": {"out": "unused"}, "linear_probe": {"c_grid": [1.0, -2.0]}})
    with pytest.raises(InputError, match="c_grid"):
        LinearProbe(MethodInputs(TASK, probe_data, bad)).fit(tmp_path / "b", 1)


def test_without_dev_the_probe_fits_once_at_the_grids_median(monkeypatch):
    from sklearn.linear_model import LogisticRegression

    from pgra.methods.linear_probe import fit_probe

    fits = []
    real_fit = LogisticRegression.fit
    monkeypatch.setattr(LogisticRegression, "fit", lambda self, *a, **k: fits.append(self.C) or real_fit(self, *a, **k))
    x = np.random.default_rng(0).normal(size=(20, 4))
    probe = fit_probe(TASK, x, ["sky", "town"] * 10, None, None, [10.0, 0.01, 1.0, 0.1], 100)
    assert fits == [0.1] and probe["c"] == 0.1 and probe["dev_scores"] == {}
