"""The causal-LM paths print no library deprecation noise unless -v: a tiny reranking, and a tiny ICL run whose
demonstrations Skill-KNN picks (the LM rewrites the inputs), each in a fresh `pgra` process, leave no
FutureWarning on stderr (transformers 5 warns `past_key_values` is deprecated on every cached forward)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pgra(argv: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTHONWARNINGS", None)  # Python's default filters: a FutureWarning shows once per place
    return subprocess.run([sys.executable, "-c", "import sys; from pgra.cli import main; sys.exit(main(sys.argv[1:]))", *argv], env=env, capture_output=True, text=True,
                          timeout=300)


def _quiet(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "FutureWarning" not in proc.stderr and "past_key_values" not in proc.stderr, proc.stderr[-3000:]


def test_reranking_prints_no_future_warning(tmp_path, candidates, tiny_opt):
    _quiet(_pgra(["rerank", "--candidates", str(candidates), "--out", str(tmp_path / "r"), "--lm", str(tiny_opt),
                  "--cache-dir", str(tmp_path / "c"), "--top-d", "3", "--num-demos", "2", "--no-show-progress"]))


def test_icl_with_skill_knn_prints_no_future_warning(tmp_path, candidates, tiny_opt, tiny_bert):
    skills = tmp_path / "skills.jsonl"
    skills.write_text("".join(json.dumps(x) + "\n" for x in (
        {"input": "The sun is hot.", "skill": "naming a thing in the sky"},
        {"input": "The king lived in the city.", "skill": "naming a place people live"})))
    _quiet(_pgra(["icl", "--data", str(candidates), "--out", str(tmp_path / "icl"), "--lm", str(tiny_opt),
                  "--selection", "skill_knn", "--demo-encoder", str(tiny_bert), "--skill-annotations", str(skills),
                  "--num-demos", "2", "--pool", "6", "--no-show-progress", "demos.max_new_tokens=4"]))
