"""The leakage audit (analysis.analyses=leakage) and the retrieve option that excludes what it flags."""

import json
from pathlib import Path

import pytest
import yaml

from pgra.analysis.leakage import exact_duplicates, near_duplicates, normalise
from pgra.core.errors import InputError
from pgra.retrieval.retrieve import read_excluded_ids
from tests import numerics
from tests.conftest import SENTENCES, SKY
from tests.test_experiment import _config


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_exact_and_near_duplicates_by_hand():
    assert normalise("  The SUN is hot!! ") == normalise("the sun, is hot.") == "the sun is hot"
    assert normalise("ﬁne Ⅳ") == "fine iv"  # NFKC
    corpus = [(0, "The sun is hot."), (1, "the sun is HOT"), (2, "The sun was hot."), ("x", "...")]
    found = exact_duplicates({"q1": "The sun is hot!", "q2": "The sun was hot", "q3": "no", "q4": "?!"}, corpus)
    assert found == {"q1": ["0", "1"], "q2": ["2"]}  # q4 normalises to nothing: never a duplicate of "..."
    records = [{"id": "a", "ctxs": [{"id": 5, "score": 0.99}, {"id": 6, "score": 0.94}]},
               {"id": "b", "ctxs": [{"id": 7, "score": 0.5}]}]
    assert near_duplicates(records, 0.95) == {"a": [("5", 0.99)]}
    assert near_duplicates(records, 0.9) == {"a": [("5", 0.99), ("6", 0.94)]}


def test_exclusion_file_is_read_and_checked(tmp_path):
    path = tmp_path / "ids.txt"
    path.write_text("# flagged\n3\n\n  abc \n3\n")
    assert read_excluded_ids(path) == {"3", "abc"}
    with pytest.raises(InputError, match="not found"):
        read_excluded_ids(tmp_path / "missing.txt")
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe1\n")
    with pytest.raises(InputError, match="not UTF-8"):
        read_excluded_ids(tmp_path / "bad.txt")


def test_planted_duplicate_is_found_read_and_excluded(tmp_path, sky_task, tiny_opt, tiny_t5, tiny_bert):
    from pgra.cli import main

    planted = "  " + SKY[7].upper().replace(".", " !!")  # test input s7, changed in case and punctuation
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join([*SENTENCES, planted, SKY[8]]) + "\n", encoding="utf-8")  # + s8 verbatim
    planted_id = str(len(SENTENCES))  # a txt corpus's ids are its line numbers
    cfg = _config(tmp_path, corpus, sky_task, tiny_opt, tiny_t5, methods=["fid"], seeds=[1])
    cfg["index"] = {"corpus": str(corpus), "out": str(tmp_path / "index"), "retriever": "dense",
                    "dense": {"encoder": str(tiny_bert), "pooler": "mean"}}
    cfg["reader"]["n_passages"] = 8  # fid reads every candidate: the planted sentence is among them
    cfg["analysis"] = {"analyses": ["leakage"], "leakage": {"threshold": 0.999}}
    cfg_file = tmp_path / "experiment.yaml"
    cfg_file.write_text(yaml.safe_dump(cfg))
    assert main(["experiment", "--config", str(cfg_file)]) == 0
    assert main(["analyze", "--config", str(cfg_file)]) == 0
    out = Path(cfg["out"])
    rows = {r["split"]: r for r in json.loads((out / "analysis" / "analysis.json").read_text())["tables"]["leakage"]}
    test = rows["test"]
    assert test["exact"] == 2
    examples = {e["id"]: e for e in test["examples"]}
    assert examples["s7"]["exact"] == [planted_id] and examples["s8"]["exact"] == [str(len(SENTENCES) + 1)]
    # the verbatim copy is a near duplicate too: the index's own encoder gives it cosine 1
    assert [n["id"] for n in examples["s8"]["near"]][:1] == [str(len(SENTENCES) + 1)]
    assert examples["s8"]["near"][0]["cosine"] == numerics.close(1.0, depth=numerics.TINY_MODEL)  # cos(v, v)
    assert rows["dev"]["exact"] == 0 and test["excluded"] is None
    # near duplicates: every candidate scored at or above the threshold, recomputed from the candidates file
    cands = _lines(out / "sky" / "candidates" / "test.jsonl")
    assert test["near"] == sum(any(c["score"] >= 0.999 for c in r["ctxs"]) for r in cands)
    ids = (out / "analysis" / "sky" / "leakage_ids.txt").read_text().split()
    assert planted_id in ids
    # fid read the planted sentence for s7 (the hand count from its predictions)
    preds = _lines(out / "sky" / "fid" / "seed-1" / "predictions_test.jsonl")
    flagged = {r["id"]: {str(c["id"]) for c in r["ctxs"] if c["score"] >= 0.999} for r in cands}
    flagged["s7"].add(planted_id)
    flagged["s8"].add(str(len(SENTENCES) + 1))
    read = sum(bool(flagged[x["id"]] & set(map(str, x["evidence"]))) for x in preds)
    assert read >= 2 and test["methods"]["fid"] == {"seeds": 1, "pairs": len(preds), "read_duplicate": read}
    assert "## Leakage audit" in (out / "analysis" / "analysis.md").read_text()

    # excluding the flagged ids re-runs the first stage (a new stage key) and drops them from every candidate list
    cfg["task_overrides"] = {str(sky_task): {"retrieve": {"exclude_ids": str(out / "analysis" / "sky" / "leakage_ids.txt")}}}
    cfg_file.write_text(yaml.safe_dump(cfg))
    before = (out / "sky" / "candidates" / ".stage_key").read_text()
    assert main(["experiment", "--config", str(cfg_file)]) == 0
    assert (out / "sky" / "candidates" / ".stage_key").read_text() != before
    for split in ("train", "dev", "test"):
        for r in _lines(out / "sky" / "candidates" / f"{split}.jsonl"):
            assert len(r["ctxs"]) == 8 and not {str(c["id"]) for c in r["ctxs"]} & set(ids)
    manifest = json.loads((out / "sky" / "candidates" / "manifest.json").read_text())
    assert manifest["excluded"]["ids"] == len(ids) and manifest["excluded"]["removed_from_top_k"]["test"] >= 1
    assert main(["analyze", "--config", str(cfg_file)]) == 0
    again = {r["split"]: r for r in json.loads((out / "analysis" / "analysis.json").read_text())["tables"]["leakage"]}
    assert again["test"]["exact"] == 2  # still in the corpus ...
    assert again["test"]["methods"]["fid"]["read_duplicate"] == 0  # ... but no longer read
    assert again["test"]["excluded"]["ids"] == len(ids)
    # ... and the audit keeps flagging what the candidates no longer show: the exclusion file, its stage key and
    # the candidates stay as they are on the next run
    assert sorted((out / "analysis" / "sky" / "leakage_ids.txt").read_text().split()) == sorted(ids)
    key, stamp = ((out / "sky" / "candidates" / name) for name in (".stage_key", "manifest.json"))
    before = (key.read_text(), stamp.stat().st_mtime_ns)
    assert main(["experiment", "--config", str(cfg_file)]) == 0
    assert (key.read_text(), stamp.stat().st_mtime_ns) == before


def test_excluding_more_ids_than_k_equals_filtering_the_full_ranking(candidates, tmp_path, sky_task):
    from pgra.retrieval.candidates_stage import retrieve
    from pgra.retrieval.retrieve import RetrieveConfig

    index = json.loads((candidates / "manifest.json").read_text())["index"]["path"]
    full = retrieve(RetrieveConfig(task=str(sky_task), index=index, out=str(tmp_path / "full"), k=40,
                                   show_progress=False))
    ranked = {r["id"]: [str(c["id"]) for c in r["ctxs"]] for r in _lines(full / "test.jsonl")}
    first = next(iter(ranked.values()))
    ids = tmp_path / "ids.txt"  # the first query's top 5 and two others: more than k=3, a short first search
    ids.write_text("\n".join(first[:5] + first[10:12]) + "\n")
    excluded = set(first[:5] + first[10:12])
    out = retrieve(RetrieveConfig(task=str(sky_task), index=index, out=str(tmp_path / "x"), k=3,
                                  exclude_ids=str(ids), show_progress=False))
    for r in _lines(out / "test.jsonl"):
        assert [str(c["id"]) for c in r["ctxs"]] == [i for i in ranked[r["id"]] if i not in excluded][:3]
    removed = json.loads((out / "manifest.json").read_text())["excluded"]["removed_from_top_k"]["test"]
    assert removed == sum(len(set(v[:3]) & excluded) for v in ranked.values())
