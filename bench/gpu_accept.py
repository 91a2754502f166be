"""GPU acceptance of the node path (issues 49, 68): one grid run every way pgra runs it on one GPU, each phase a PASS
or a FAIL with its reasons. ``bash bench/gpu_accept.sh`` runs every phase under its own time limit and then
``summary``; this driver holds their logic.

    python bench/gpu_accept.py --out DIR [--work SCRATCH] [--cpu] phase NAME   # one phase; DIR/phases/NAME.json
    python bench/gpu_accept.py --out DIR summary                              # the table, DIR/gpu_accept.json

``--out`` gets the logs, the table and the JSON; ``--work`` (default ``DIR/scratch``; gpu_accept.sh gives a
``mktemp -d`` outside ``$OUT``) the fixtures, grids, index and numba's cache. No network and no downloads: every
model is built here from a config with random weights (a ~1.2B-parameter OPT so that memory shows on a GPU, a
T5-base-shaped reader for the side-by-side timing; tiny ones in CPU mode, ``--cpu`` or no GPU listed). A GPU that
``nvidia-smi -L`` lists and torch cannot use fails the env phase (no CPU-mode pass on a GPU machine) unless
``--cpu`` was asked. The BM25 kernels are compiled first (``warm``). The grid (one task, fid and knn_vote: two
cells, one a reader) is then run by one process (the reference), under torchrun with two ranks on one GPU
(``cells_per_gpu 2``), by two jobs of which one is killed mid-cell (``PGRA_FAULT``), after a forged takeover from
another host, by ``--launcher local --workers 2`` on one GPU and under the variables other launchers set: every
cell's key and predictions must equal the reference's byte for byte. Then a causal LM loaded straight to the device
(host memory peak, GPU memory left after release), the reranking stage with that LM under torchrun with two ranks
on the GPU (one loads it), the reader's CUDA-graph loop (compile, reduce-overhead) and two reader cells (two seeds)
run side by side by two jobs on the GPU against one after the other by one job (the wall-clock ratio is printed,
not judged).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "scripts" / "experiment.py"
PHASES = ("env", "fixtures", "warm", "reference", "torchrun_shared", "kill_resume", "takeover", "local_workers",
          "launcher_env", "lm_to_device", "rerank_stage", "graph_loop", "side_by_side")
PREDICTIONS = ("predictions_dev.jsonl", "predictions_test.jsonl")
KILLED = 137  # pgra.core.faults.KILLED_EXIT
FAULT = "train.step@2"
# what other launchers put in a rank's environment (srun --mpi=pmi2, mpirun, accelerate launch with DeepSpeed):
# the ranks carry them, the cells' processes must not see them
LAUNCHER_VARS = {"PMI_SIZE": "2", "PMI_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0",
                 "OMPI_COMM_WORLD_LOCAL_RANK": "0", "ACCELERATE_USE_DEEPSPEED": "true",
                 "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2", "ACCELERATE_DEEPSPEED_CONFIG_FILE": "none",
                 "ACCELERATE_MIXED_PRECISION": "bf16", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "1",
                 "ACCELERATE_DYNAMO_BACKEND": "NO"}
SENTENCES = ["The sun is a star at the centre of the solar system.", "The moon orbits the planet once a month.",
             "A river runs through the old town.", "The king and the queen ruled the city for ten years.",
             "The film won a prize for its music.", "The war ended in 1918.", "Water boils at one hundred degrees.",
             "The game is played with a ball and two teams.", "Light from the star takes years to arrive.",
             "The song was written by a famous artist.", "The city is on the bank of a river.",
             "The planet has two moons and a ring.", "The town was founded by a king.",
             "Music and art were taught in the city.", "A star is a ball of hot gas.",
             "The queen wrote a song about the war.", "The river flows to the sea.",
             "Each orbit of the moon takes a month.", "The film was shot in the town.",
             "The game ended with a win for the city.", "It was the coldest year of the war.",
             "Light is faster than sound.", "The art of the king was famous.", "The sun rises in the east."]
SKY = ["The star shines at night.", "The moon is bright tonight.", "The sun sets in the west.",
       "A planet moves around the sun.", "Light from the moon is soft.", "The star is far away.",
       "The orbit of the planet is long.", "The sun is hot.", "The moon has no light of its own.",
       "Stars and planets fill the sky."]
TOWN = ["The king lived in the city.", "The river runs by the town.", "The queen sang a song.",
        "The film was made in the city.", "The game was played in town.", "The war hurt the town.",
        "Art and music fill the city.", "The town has a river.", "The king wrote a song.",
        "The city has a famous film festival."]
# model shapes: CPU mode, GPU mode
T5_GRID = ({"d_model": 32, "d_ff": 64, "d_kv": 16, "num_layers": 2, "num_heads": 2},
           {"d_model": 256, "d_ff": 1024, "d_kv": 64, "num_layers": 4, "num_heads": 4})
T5_BASE = ({"d_model": 32, "d_ff": 64, "d_kv": 16, "num_layers": 2, "num_heads": 2},
           {"d_model": 768, "d_ff": 3072, "d_kv": 64, "num_layers": 12, "num_heads": 12})
OPT = ({"hidden_size": 32, "num_hidden_layers": 2, "ffn_dim": 64, "num_attention_heads": 2},
       {"hidden_size": 2048, "num_hidden_layers": 24, "ffn_dim": 8192, "num_attention_heads": 32})


# ----- the run of one phase -----
class Phase:
    """One phase's checks, details and processes (killed with their process groups when the phase is stopped)."""

    def __init__(self, out: Path, name: str, limit: float) -> None:
        self.out, self.name = out, name
        self.deadline = time.monotonic() + max(limit - 5, 1)
        self.checks: dict[str, bool] = {}
        self.details: dict = {}
        self.procs: list[subprocess.Popen] = []
        self.started = time.monotonic()

    def check(self, name: str, ok: bool, detail=None) -> bool:
        self.checks[name] = bool(ok)
        if detail is not None and not ok:
            self.details.setdefault("failures", {})[name] = detail
        return bool(ok)

    def start(self, argv: list[str], log: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """``argv`` started in a session of its own (so that stopping the phase stops its children too), its
        output in ``<out>/logs/<log>.log``."""
        path = self.out / "logs" / f"{log}.log"  # (logs are small: they go with the table to $OUT)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env or run_env(self.out),
                                    cwd=ROOT, start_new_session=True, text=True)
        proc.log = path  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def wait(self, proc: subprocess.Popen) -> int:
        """``proc``'s exit code; killed (-9) at the phase's deadline."""
        try:
            return proc.wait(timeout=max(self.deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            self.stop()
            self.details["timed_out"] = True
            return proc.wait()

    def run(self, argv: list[str], log: str, env: dict[str, str] | None = None) -> tuple[int, str, float]:
        start = time.monotonic()
        proc = self.start(argv, log, env)
        code = self.wait(proc)
        return code, proc.log.read_text(errors="replace"), time.monotonic() - start  # type: ignore[attr-defined]

    def stop(self) -> None:
        for proc in self.procs:  # the whole group: a launcher's children may outlive it
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.poll()

    def result(self, error: str | None = None) -> dict:
        ok = error is None and bool(self.checks) and all(self.checks.values())
        reason = error or "; ".join(k for k, v in self.checks.items() if not v) or ("" if ok else "nothing checked")
        return {"phase": self.name, "status": "PASS" if ok else "FAIL", "seconds": round(time.monotonic() -
                self.started, 1), "checks": self.checks, "reason": reason, "details": self.details}


_WORK: Path | None = None  # the scratch folder (fixtures, grids, index; --work), outside $OUT


def scratch(out: Path) -> Path:
    """Where a run's fixtures, grids and index go: ``--work`` (gpu_accept.sh: a ``mktemp -d`` outside ``$OUT``,
    whose returned files must stay small: the fixtures are gigabytes on a GPU), else ``<out>/scratch``."""
    return _WORK if _WORK is not None else out / "scratch"


def mode(out: Path) -> str:
    """``cpu`` or ``gpu``, as the env phase decided."""
    path = out / "mode.json"
    return json.loads(path.read_text())["mode"] if path.exists() else "cpu"


def run_env(out: Path, **extra: str) -> dict[str, str]:
    """The environment of every process a phase starts: one thread (floats byte-identical between processes), one
    GPU (the first visible one) in GPU mode, none in CPU mode."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)}
    env.pop("PGRA_FAULT", None)
    env["NUMBA_CACHE_DIR"] = str(scratch(out) / "numba")  # the kernels the warm phase compiled, for every phase
    if mode(out) == "gpu":
        env["CUDA_VISIBLE_DEVICES"] = json.loads((out / "mode.json").read_text())["gpu"]
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""  # hidden on purpose: no GPU expected, none used
    return {**env, **extra}


# ----- the grid -----
def grid_config(out: Path, name: str, reader: str = "grid", **extra) -> Path:
    """The grid's YAML for the run ``name`` (its folder ``<out>/grids/<name>``)."""
    import yaml

    gpu = mode(out) == "gpu"
    fx = scratch(out) / "fixtures"
    steps = {"grid": 6 if gpu else 3, "base": 150 if gpu else 3}[reader]
    model = "t5-base" if reader == "base" and gpu else "t5-grid"  # in CPU mode both tiny: one folder
    cfg = {"out": str(scratch(out) / "grids" / name), "tasks": [str(fx / "sky.yaml")], "methods": ["fid", "knn_vote"],
           "seeds": [1], "index": {"corpus": str(fx / "corpus.txt"), "out": str(scratch(out) / "index"),
                                      "retriever": "bm25"},
           "retrieve": {"k": 6}, "knn_vote": {"k": 3}, "show_progress": False, "report": True, "claim_poll_s": 0.5,
           "reader": {"model": str(fx / model),
                      "n_passages": 2 if reader == "grid" else 4, "max_length": 32 if reader == "grid" else 64,
                      "batch_size": 4 if reader == "grid" else 8, "max_steps": steps, "eval_every": 0,
                      "save_every": 1 if reader == "grid" else 0, "eval_batch_size": 8, "learning_rate": 1e-3}}
    cfg.update(extra)
    path = scratch(out) / "grids" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    return path


def cells(folder: Path) -> dict[str, Path]:
    return {"/".join(p.parent.parts[-3:]): p.parent for p in sorted(folder.glob("*/*/seed-*/cell.json"))}


def differences(out: Path, name: str, reference: str = "reference", labels: list[str] | None = None) -> list[str]:
    """How the cells of run ``name`` (those of ``labels``, default all) differ from the reference's (key,
    predictions byte for byte, results)."""
    ref, got = cells(scratch(out) / "grids" / reference), cells(scratch(out) / "grids" / name)
    if labels is not None:
        ref = {k: v for k, v in ref.items() if k in labels}
    if not ref:
        return ["the reference has no finished cell"]
    diffs = [f"{label}: not finished" for label in sorted(set(ref) - set(got))]
    for label in sorted(set(ref) & set(got)):
        a, b = ref[label], got[label]
        for f in (".cell_key", *PREDICTIONS):
            if (a / f).read_bytes() != (b / f).read_bytes():
                diffs.append(f"{label}: {f} differs")
        if json.loads((a / "cell.json").read_text())["results"] != json.loads((b / "cell.json").read_text())["results"]:
            diffs.append(f"{label}: results differ")
    return diffs


def started(text: str) -> list[str]:
    """The cells a run's output says it started (anywhere in a line: ranks share one pipe)."""
    return re.findall(r"\[([^\s\[\]]+/seed-\d+)\] (?:running|resuming)\b", text)


def ran_by(out: Path, name: str) -> dict[str, str]:
    return {label: json.loads((d / "cell.json").read_text())["ran_by"].get("worker", "")
            for label, d in cells(scratch(out) / "grids" / name).items()}


def same_grid(p: Phase, name: str, code: int, text: str, labels: list[str] | None = None) -> None:
    """The common checks of a grid run: it ended well, each cell ran once, every cell (of ``labels``) equals the
    reference's."""
    p.check("exit 0", code == 0, text[-2000:])
    diffs = differences(p.out, name, labels=labels)
    p.check("cells equal the reference byte for byte", not diffs, diffs)
    runs = started(text)
    p.check("each cell started once", sorted(runs) == sorted(set(runs)), runs)
    p.check("report written", (scratch(p.out) / "grids" / name / "results.md").exists())
    p.details["ran_by"] = ran_by(p.out, name)


def torchrun(p: Phase, config: Path, log: str, env: dict[str, str] | None = None) -> tuple[int, str, float]:
    return p.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                  str(EXPERIMENT), "--config", str(config)], log, env)


class GpuMemory:
    """The most GPU memory in use while it runs (nvidia-smi every 0.5 s, GPU mode only), in MiB."""

    def __init__(self, out: Path) -> None:
        self.gpu = json.loads((out / "mode.json").read_text()).get("gpu") if mode(out) == "gpu" else None
        self.peak, self._stop = 0, threading.Event()

    def __enter__(self):
        if self.gpu is not None and shutil.which("nvidia-smi"):
            threading.Thread(target=self._sample, daemon=True).start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            q = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i",
                                self.gpu], capture_output=True, text=True)
            if q.returncode == 0 and q.stdout.strip().isdigit():
                self.peak = max(self.peak, int(q.stdout.strip()))
            self._stop.wait(0.5)

    def __exit__(self, *exc) -> None:
        self._stop.set()


# ----- the phases -----
def phase_env(p: Phase, cpu: bool) -> None:
    import platform

    import torch

    cuda = torch.cuda.is_available() and not cpu
    info = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "cuda_available": torch.cuda.is_available(), "cpus": os.cpu_count(), "mode": "gpu" if cuda else "cpu"}
    for name in ("transformers", "accelerate", "tokenizers", "pyyaml"):
        try:
            info[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            info[name] = "missing"
    smi = shutil.which("nvidia-smi")
    listed = []
    if smi:
        q = subprocess.run([smi, "--query-gpu=index,name,driver_version,compute_mode,mig.mode.current,memory.total,"
                            "memory.used", "--format=csv,noheader"], capture_output=True, text=True)
        info["nvidia_smi"] = q.stdout.strip().splitlines() or q.stderr.strip()
        q = subprocess.run([smi, "-L"], capture_output=True, text=True)
        listed = [line.strip() for line in q.stdout.splitlines() if line.strip().startswith("GPU ")]
        if q.returncode != 0 and not listed:  # nvidia-smi there but failing (the driver not loaded): a GPU machine
            listed = [f"nvidia-smi -L failed ({q.returncode}): {q.stderr.strip()[:200]}"]
        info["gpus_listed"] = listed
    if not listed and os.path.exists("/dev/nvidia0"):
        listed = ["/dev/nvidia0"]
    if listed and not cpu and not torch.cuda.is_available():  # not a CPU-mode pass on a GPU machine: refused
        info["refused"] = (f"nvidia-smi -L lists {len(listed)} GPU(s) but torch {torch.__version__} sees no CUDA "
                           f"({'a CPU-only build' if torch.version.cuda is None else 'built for CUDA ' + torch.version.cuda}"
                           "): install a CUDA torch or check the driver, or ask for CPU mode with --cpu")
        print(f"error: {info['refused']}", flush=True)
    p.check("torch sees the GPUs nvidia-smi lists (or --cpu)", "refused" not in info, info.get("refused"))
    gpu = ""
    if cuda:
        gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
        info["device"] = torch.cuda.get_device_name(0)
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        info["bf16"] = torch.cuda.is_bf16_supported()
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        modes = [line.split(",")[3].strip() for line in info.get("nvidia_smi", []) if line.count(",") >= 6]
        p.check("compute mode lets processes share a GPU", all(m == "Default" for m in modes),
                f"compute mode {modes}: ranks and workers cannot share one GPU")
    elif not cpu and not listed:
        info["note"] = "no GPU listed, no CUDA: CPU mode (tiny models)"
    p.check("torch imports", True)
    for name in ("transformers", "accelerate", "tokenizers", "pyyaml"):
        p.check(f"{name} installed", info[name] != "missing", info[name])
    (p.out / "mode.json").write_text(json.dumps({"mode": info["mode"], "gpu": gpu,
                                                 **({"refused": info["refused"]} if "refused" in info else {})}))
    p.details.update(info)
    print(json.dumps(info, indent=1))


def write_t5(path: Path, shape: dict, device: str = "cpu") -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    path.mkdir(parents=True, exist_ok=True)
    specials = ["<pad>", "</s>", "<unk>", "<extra_id_0>", "<extra_id_1>"]
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    words = SENTENCES + SKY + TOWN + ["This is about sky town great terrible correct incorrect question context ? : ,"]
    tok.train_from_iterator(words, trainers.WordLevelTrainer(special_tokens=specials))
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
                            additional_special_tokens=specials[3:]).save_pretrained(str(path))
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=tok.get_vocab_size(), dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0,
                   eos_token_id=1, **shape)
    with torch.device(device):  # on the GPU its random initialisation takes no time
        model = T5ForConditionalGeneration(cfg)
    model.save_pretrained(str(path))


def write_opt(path: Path, shape: dict, dtype: str, device: str = "cpu") -> int:
    """A random OPT of ``shape`` with a small byte-level BPE, built on ``device`` and saved in ``dtype``; its
    parameter count."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import OPTConfig, OPTForCausalLM, PreTrainedTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(SENTENCES * 3, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<pad>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(single="</s> $A", special_tokens=[("</s>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="</s>", eos_token="</s>", pad_token="<pad>",
                            unk_token="<unk>").save_pretrained(str(path))
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))  # built in the dtype it is saved in: half the host memory
    try:
        with torch.device(device):
            model = OPTForCausalLM(OPTConfig(vocab_size=tok.get_vocab_size(), max_position_embeddings=512,
                                             pad_token_id=0, bos_token_id=1, eos_token_id=1, **shape))
    finally:
        torch.set_default_dtype(default)
    model.save_pretrained(str(path))
    return sum(x.numel() for x in model.parameters())


def phase_fixtures(p: Phase) -> None:
    import yaml

    gpu = mode(p.out) == "gpu"
    fx = scratch(p.out) / "fixtures"
    if fx.exists():
        shutil.rmtree(fx)
    fx.mkdir(parents=True)
    (fx / "corpus.txt").write_text("\n".join(SENTENCES) + "\n")
    rows = [(f"s{i}", t, "sky") for i, t in enumerate(SKY)] + [(f"t{i}", t, "town") for i, t in enumerate(TOWN)]
    (fx / "skydata").mkdir()
    for split, part in (("train", rows[:7] + rows[10:17]), ("test", rows[7:10] + rows[17:])):
        (fx / "skydata" / f"{split}.jsonl").write_text(
            "".join(json.dumps({"id": i, "text": t, "label": y}) + "\n" for i, t, y in part))
    (fx / "sky.yaml").write_text(yaml.safe_dump({
        "name": "sky", "labels": ["sky", "town"], "rerank_template": "Is this about the sky or a town?\n{text}",
        "demo_words": {"sky": "sky", "town": "town"}, "reader_words": {"sky": "sky", "town": "town"},
        "data": {"format": "jsonl", "path": "skydata", "id_column": "id",
                 "files": {"train": "train.jsonl", "test": "test.jsonl"}, "dev_fraction": 0.15}}))
    t0 = time.monotonic()
    device = "cuda" if gpu else "cpu"
    write_t5(fx / "t5-grid", T5_GRID[gpu], device)
    if gpu:
        write_t5(fx / "t5-base", T5_BASE[gpu], device)
    p.details["opt_parameters"] = write_opt(fx / "opt", OPT[gpu], "bfloat16" if gpu else "float32", device)
    p.details["build_s"] = round(time.monotonic() - t0, 1)
    for name in ("t5-grid", "t5-base", "opt") if gpu else ("t5-grid", "opt"):
        p.check(f"{name} written", (fx / name / "config.json").exists())


def phase_reference(p: Phase) -> None:
    shutil.rmtree(scratch(p.out) / "index", ignore_errors=True)
    code, text, wall = p.run([sys.executable, str(EXPERIMENT), "--config", str(grid_config(p.out, "reference"))],
                             "reference")
    p.details["wall_s"] = round(wall, 1)
    p.check("exit 0", code == 0, text[-2000:])
    got = cells(scratch(p.out) / "grids" / "reference")
    p.check("both cells finished", sorted(got) == ["sky/fid/seed-1", "sky/knn_vote/seed-1"], sorted(got))


def phase_torchrun_shared(p: Phase) -> None:
    config = grid_config(p.out, "torchrun_shared", cells_per_gpu=2)
    with GpuMemory(p.out) as memory:
        code, text, wall = torchrun(p, config, "torchrun_shared")
    p.details.update(wall_s=round(wall, 1), gpu_peak_mib=memory.peak)
    same_grid(p, "torchrun_shared", code, text)
    p.check("cells ran in the ranks' children", set(p.details["ran_by"].values()) <= {"rank 0", "rank 1"},
            p.details["ran_by"])


def phase_kill_resume(p: Phase) -> None:
    """Job A starts; once it runs a reader cell, job B joins; A is killed at its cell's second step, B takes the
    cell over (same host: A's pid is gone) and resumes it."""
    config = grid_config(p.out, "kill_resume")
    argv = [sys.executable, str(EXPERIMENT), "--config", str(config)]
    a = p.start(argv, "kill_resume-A", run_env(p.out, PGRA_FAULT=FAULT))
    while time.monotonic() < p.deadline and a.poll() is None and \
            "[sky/fid/seed-1] running" not in a.log.read_text(errors="replace"):  # type: ignore[attr-defined]
        time.sleep(0.2)
    b = p.start(argv, "kill_resume-B")
    code_a = p.wait(a)  # reaped at once: B sees its pid gone
    code_b = p.wait(b)
    text_a, text_b = a.log.read_text(errors="replace"), b.log.read_text(errors="replace")  # type: ignore
    p.check("job A killed at the fault", code_a == KILLED and f"killed at {FAULT.split('@')[0]}" in text_a,
            [code_a, text_a[-1500:]])
    killed = started(text_a)[-1] if started(text_a) else "?"
    p.details["killed_cell"] = killed
    p.check("job B took the cell over", f"taking over the lock of process {a.pid}" in text_b, text_b[-1500:])
    p.check("job B resumed it", f"[{killed}] resuming" in text_b, text_b[-1500:])
    same_grid(p, "kill_resume", code_b, text_b)


def phase_takeover(p: Phase) -> None:
    """A job killed mid-cell "on another host": its claim and the cell's .pgra-lock say node-17 and their heartbeat
    stopped an hour ago; the next job takes both over and resumes the cell."""
    config = grid_config(p.out, "takeover", claim_stale_after_s=60)
    argv = [sys.executable, str(EXPERIMENT), "--config", str(config)]
    killed = p.start(argv, "takeover-killed", run_env(p.out, PGRA_FAULT=FAULT))
    code = p.wait(killed)
    text = killed.log.read_text(errors="replace")  # type: ignore[attr-defined]
    if not p.check("the first job was killed", code == KILLED and started(text), [code, text[-1500:]]):
        return
    label = started(text)[-1]
    cell = scratch(p.out) / "grids" / "takeover" / label
    old = time.time() - 3600
    forged = []
    for path in (cell.parent / f".{cell.name}.claim", cell / ".pgra-lock"):
        if path.exists():
            path.write_text(json.dumps({**json.loads(path.read_text()), "host": "node-17"}))
            os.utime(path, (old, old))
            forged.append(path.name)
    p.check("claim and lock forged", len(forged) == 2, forged)
    code, text, wall = p.run(argv, "takeover-rerun")
    taken = f"taking over the lock of process {killed.pid} on host node-17"
    p.check("claim and lock taken over", text.count(taken) == 2, text[-2000:])
    record = json.loads((cell / "cell.json").read_text()) if (cell / "cell.json").exists() else {}
    p.check("the cell resumed", f"[{label}] resuming" in text and record.get("cost", {}).get("resumed"),
            text[-1500:])
    same_grid(p, "takeover", code, text)


def phase_local_workers(p: Phase) -> None:
    config = grid_config(p.out, "local_workers", cells_per_gpu=2)
    with GpuMemory(p.out) as memory:
        code, text, wall = p.run([sys.executable, str(EXPERIMENT), "--config", str(config), "--launcher", "local",
                                  "--workers", "2"], "local_workers")
    p.details.update(wall_s=round(wall, 1), gpu_peak_mib=memory.peak)
    same_grid(p, "local_workers", code, text)
    p.check("cells ran in the workers", set(p.details["ran_by"].values()) <= {"local-0", "local-1"},
            p.details["ran_by"])


def phase_launcher_env(p: Phase) -> None:
    """The reader cell (the one accelerate's and DeepSpeed's variables would turn into a 2-process job) under
    torchrun with srun's, mpirun's and accelerate launch's variables set for the ranks."""
    config = grid_config(p.out, "launcher_env", methods=["fid"], cells_per_gpu=2)
    code, text, wall = torchrun(p, config, "launcher_env", run_env(p.out, **LAUNCHER_VARS))
    p.details["wall_s"] = round(wall, 1)
    same_grid(p, "launcher_env", code, text, labels=["sky/fid/seed-1"])


LM_PROBE = r'''
import json, sys, threading, time
import torch
from pgra.lm.causal_lm import CausalLM
from pgra.experiment.cell_process import release_gpu_memory

def status():
    out = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM", "RssAnon"):
            out[k] = int(v.split()[0]) * 1024
    return out

cuda = torch.cuda.is_available()
if cuda:
    torch.zeros(1, device="cuda")  # the CUDA context first: its host memory is not the load's
base = status()
peak = [base["RssAnon"]]
done = threading.Event()
def sample():
    while not done.is_set():
        peak[0] = max(peak[0], status()["RssAnon"])
        time.sleep(0.005)
threading.Thread(target=sample, daemon=True).start()
t0 = time.perf_counter()
lm = CausalLM(sys.argv[1], device="cuda" if cuda else "cpu", dtype="bf16" if cuda else "fp32")
model = lm.model
if cuda:
    torch.cuda.synchronize()
r = {"load_s": round(time.perf_counter() - t0, 2), "device": str(next(model.parameters()).device),
     "model_bytes": sum(p.numel() * p.element_size() for p in model.parameters())}
if cuda:
    r["reserved_loaded"] = torch.cuda.memory_reserved()
del model
lm.release()
if cuda:
    r["reserved_after_release"] = torch.cuda.memory_reserved()
    r["allocated_after_release"] = torch.cuda.memory_allocated()
    release_gpu_memory()  # what a rank does before it starts a cell's process
    r["reserved_after_empty_cache"] = torch.cuda.memory_reserved()
done.set()
end = status()
r.update(rss_before=base["VmRSS"], rss_peak=end["VmHWM"], rss_after=end["VmRSS"],
         anon_peak_growth=peak[0] - base["RssAnon"])
print("PROBE " + json.dumps(r))
'''


def phase_lm_to_device(p: Phase) -> None:
    code, text, wall = p.run([sys.executable, "-c", LM_PROBE, str(scratch(p.out) / "fixtures" / "opt")],
                             "lm_to_device")
    found = re.findall(r"^PROBE (.*)$", text, flags=re.M)
    if not p.check("the LM loaded", code == 0 and found, text[-2000:]):
        return
    r = json.loads(found[-1])
    gib = {k: round(v / 2**30, 3) for k, v in r.items() if isinstance(v, int)}
    p.details.update(r, gib=gib)
    print(json.dumps(gib, indent=1))
    if mode(p.out) == "gpu":
        size = r["model_bytes"]
        p.check("weights on the GPU", r["device"].startswith("cuda"), r["device"])
        p.check("host memory stays below half the weights while loading", r["anon_peak_growth"] < 0.5 * size,
                f"anonymous RSS grew {gib['anon_peak_growth']} GiB for {gib['model_bytes']} GiB of weights")
        p.check("GPU memory returned after release", r["reserved_after_empty_cache"] < 0.1 * size,
                f"{gib['reserved_after_empty_cache']} GiB still reserved")
    else:
        p.check("weights on the CPU", r["device"] == "cpu", r["device"])


WARM = r'''
import sys, time
from pgra.retrieval.build import build_index
from pgra.retrieval.index import Index, IndexConfig
t0 = time.perf_counter()
index = build_index(IndexConfig(corpus=sys.argv[1], out=sys.argv[2], retriever="bm25", show_progress=False))
Index(index).search(["The star shines at night."], 3)
print(f"WARM {time.perf_counter() - t0:.1f}")
'''


def phase_warm(p: Phase) -> None:
    """The BM25 kernels (numba) compiled once, into the cache every later phase reads (``NUMBA_CACHE_DIR`` in the
    scratch folder), so that no phase's limit holds a cold compile; timed twice: cold, then from the cache."""
    fx = scratch(p.out) / "fixtures"
    for attempt in ("cold", "cached"):
        target = scratch(p.out) / "warm" / attempt
        shutil.rmtree(target, ignore_errors=True)
        code, text, wall = p.run([sys.executable, "-c", WARM, str(fx / "corpus.txt"), str(target)], f"warm-{attempt}")
        p.details[f"{attempt}_s"] = round(wall, 1)
        p.check(f"{attempt}: built and searched", code == 0 and "WARM " in text, text[-2000:])
    p.check("the kernels were cached", any((scratch(p.out) / "numba").rglob("*.nbi")),
            "no numba index in the cache folder")


def phase_rerank_stage(p: Phase) -> None:
    """The prompt-guided reranking stage with the OPT fixture (about 1.2B parameters on a GPU) under torchrun, two
    ranks on the one GPU (``cells_per_gpu 2``), then its reader cell in a rank's child process: the stage's LM is
    loaded by one rank of the two (its cost record's ``processes``: 1 on a GPU; on a CPU both ranks work), and the
    GPU's memory peak is recorded (the LM once, then the cell)."""
    fx = scratch(p.out) / "fixtures"
    config = grid_config(p.out, "rerank_stage", methods=["pgra"], cells_per_gpu=2,
                         rerank={"lm": str(fx / "opt"), "num_demos": 2, "top_d": 3,
                                 "cache_dir": str(scratch(p.out) / "rerank-cache")})
    with GpuMemory(p.out) as memory:
        code, text, wall = torchrun(p, config, "rerank_stage")
    p.details.update(wall_s=round(wall, 1), gpu_peak_mib=memory.peak)
    p.check("exit 0", code == 0, text[-2000:])
    stage = scratch(p.out) / "grids" / "rerank_stage" / "sky" / "reranked"
    p.check("reranked stage written", (stage / "manifest.json").exists(), text[-1500:])
    if (stage / "cost.json").exists():
        cost = json.loads((stage / "cost.json").read_text())
        p.details.update(processes=cost.get("processes"), devices=cost.get("devices"),
                         stage_s=cost.get("elapsed_s"), hardware=cost.get("hardware", {}).get("device"))
        want = 1 if mode(p.out) == "gpu" else 2
        p.check("the stage's LM on one rank per GPU", cost.get("processes") == want,
                f"{cost.get('processes')} process(es) built the stage, expected {want}")
    done = cells(scratch(p.out) / "grids" / "rerank_stage")
    p.check("the pgra cell finished", sorted(done) == ["sky/pgra/seed-1"], sorted(done))


def phase_graph_loop(p: Phase) -> None:
    """The reader's CUDA-graph loop (``compile: true``, ``compile_mode: reduce-overhead``, ``pad_to_multiple``:
    the paper config's fastest step) on a reader cell: it trains and predicts, and inductor logs no skipped CUDA
    graph (``TORCH_LOGS=cudagraphs``). In CPU mode the same cell runs eager (CUDA graphs need a GPU; inductor's
    CPU compile would take minutes of the suite): only the loop with padded batches is checked."""
    gpu = mode(p.out) == "gpu"
    config = grid_config(p.out, "graph_loop", methods=["fid"])
    import yaml

    cfg = yaml.safe_load(config.read_text())
    cfg["reader"].update({"compile": True, "compile_mode": "reduce-overhead", "pad_to_multiple": 16} if gpu else
                         {"pad_to_multiple": 16})
    config.write_text(yaml.safe_dump(cfg))
    code, text, wall = p.run([sys.executable, str(EXPERIMENT), "--config", str(config)], "graph_loop",
                             run_env(p.out, TORCH_LOGS="cudagraphs") if gpu else None)
    p.details.update(wall_s=round(wall, 1), compiled=gpu)
    p.check("exit 0", code == 0, text[-2000:])
    done = cells(scratch(p.out) / "grids" / "graph_loop")
    p.check("the reader cell finished", sorted(done) == ["sky/fid/seed-1"], sorted(done))
    if gpu:
        skips = re.findall(r"skipping cudagraphs[^\n]*", text)
        p.details["cudagraph_skips"] = skips[:5]
        p.check("no CUDA graph skipped", not skips, skips[:5])


def phase_side_by_side(p: Phase) -> None:
    """Two reader cells (fid, seeds 1 and 2; a T5-base-shaped reader in GPU mode) run one after the other by one
    job, then side by side by two jobs on the same GPU (each claims one); the wall-clock ratio is printed."""
    walls = {}
    for name, jobs in (("one_after_the_other", 1), ("side_by_side", 2)):
        config = grid_config(p.out, name, reader="base", methods=["fid"], seeds=[1, 2], cells_per_gpu=2)
        start = time.monotonic()
        with GpuMemory(p.out) as memory:
            procs = [p.start([sys.executable, str(EXPERIMENT), "--config", str(config)], f"{name}-{i}")
                     for i in range(jobs)]
            codes = [p.wait(proc) for proc in procs]
        walls[name] = time.monotonic() - start
        p.check(f"{name}: exit 0", codes == [0] * jobs, [proc.log.read_text()[-1500:] for proc in procs])  # type: ignore
        done = cells(scratch(p.out) / "grids" / name)
        p.check(f"{name}: both cells finished", sorted(done) == ["sky/fid/seed-1", "sky/fid/seed-2"], sorted(done))
        p.details[name] = {"wall_s": round(walls[name], 1), "gpu_peak_mib": memory.peak,
                           "cells_s": {k: json.loads((d / "cell.json").read_text())["elapsed_s"]
                                       for k, d in done.items()}}
    ratio = walls["side_by_side"] / walls["one_after_the_other"]
    p.details["wall_ratio"] = round(ratio, 3)
    p.details["same_predictions"] = not differences(p.out, "side_by_side", reference="one_after_the_other")
    print(f"two reader cells side by side / one after the other: {ratio:.2f} of the wall-clock "
          f"({walls['side_by_side']:.1f} s / {walls['one_after_the_other']:.1f} s; not judged)")


RUNS = {"warm": phase_warm, "rerank_stage": phase_rerank_stage, "graph_loop": phase_graph_loop,
        "torchrun_shared": phase_torchrun_shared, "kill_resume": phase_kill_resume, "takeover": phase_takeover,
        "local_workers": phase_local_workers, "launcher_env": phase_launcher_env, "reference": phase_reference,
        "fixtures": phase_fixtures, "lm_to_device": phase_lm_to_device, "side_by_side": phase_side_by_side}


def run_phase(out: Path, name: str, cpu: bool, limit: float) -> int:
    p = Phase(out, name, limit)
    (out / "phases").mkdir(parents=True, exist_ok=True)
    target = out / "phases" / f"{name}.json"
    target.unlink(missing_ok=True)

    def stopped(signum, frame):  # the phase's time limit (timeout sends SIGTERM): its processes go too
        p.stop()
        target.write_text(json.dumps(p.result(f"stopped at its time limit ({limit:.0f} s)"), indent=1))
        os._exit(124)

    signal.signal(signal.SIGTERM, stopped)
    error = None
    try:
        phase_env(p, cpu) if name == "env" else RUNS[name](p)
    except Exception as e:  # the phase fails with its reason; the next phases still run
        import traceback

        traceback.print_exc()
        error = f"{type(e).__name__}: {e}"
    finally:
        p.stop()
    if p.details.get("timed_out"):
        error = error or f"stopped at its time limit ({limit:.0f} s)"
    result = p.result(error)
    target.write_text(json.dumps(result, indent=1))
    print(f"== {name}: {result['status']} ({result['seconds']} s){': ' + result['reason'] if result['reason'] else ''}")
    return 0 if result["status"] == "PASS" else 1


def note(result: dict) -> str:
    d = result.get("details", {})
    if result["status"] != "PASS":
        return result.get("reason", "")[:90]
    if result["phase"] == "env":
        return f"{d.get('mode')} mode; " + (f"{d.get('device')}, torch {d.get('torch')} CUDA {d.get('torch_cuda')}"
                                             if d.get("mode") == "gpu" else f"torch {d.get('torch')}")
    if result["phase"] == "side_by_side":
        return f"wall-clock ratio {d.get('wall_ratio')} (side by side / one after the other)"
    if result["phase"] == "lm_to_device":
        g = d.get("gib", {})
        return (f"{g.get('model_bytes')} GiB of weights; host RSS peak {g.get('rss_peak')} GiB"
                + (f", {g.get('reserved_after_empty_cache')} GiB reserved after release" if
                   "reserved_after_empty_cache" in g else ""))
    if "gpu_peak_mib" in d and d["gpu_peak_mib"]:
        return f"GPU memory peak {d['gpu_peak_mib']} MiB"
    return ""


def summary(out: Path) -> int:
    rows = []
    for name in PHASES:
        path = out / "phases" / f"{name}.json"
        if path.exists():
            rows.append(json.loads(path.read_text()))
            continue
        rc = out / "phases" / f"{name}.rc"
        why = f"no result (exit {rc.read_text().strip()}; see {name}.log)" if rc.exists() else "not run"
        rows.append({"phase": name, "status": "FAIL", "seconds": None, "reason": why, "checks": {}, "details": {}})
    passed = all(r["status"] == "PASS" for r in rows)
    report = {"mode": mode(out), "passed": passed, "phases": rows,
              "seconds": round(sum(r["seconds"] or 0 for r in rows), 1)}
    (out / "gpu_accept.json").write_text(json.dumps(report, indent=1))
    lines = [f"{'phase':<16} {'status':<6} {'seconds':>8}  note", "-" * 78]
    lines += [f"{r['phase']:<16} {r['status']:<6} {r['seconds'] if r['seconds'] is not None else '-':>8}  {note(r)}"
              for r in rows]
    lines.append(f"{'all' if passed else 'FAILED'}: {sum(r['status'] == 'PASS' for r in rows)} of {len(rows)} "
                 f"phases passed, {report['seconds']} s ({report['mode']} mode); JSON: {out / 'gpu_accept.json'}")
    (out / "gpu_accept.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if passed else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="logs, the table and JSON")
    ap.add_argument("--work", type=Path, help="scratch: fixtures, grids, index (default <out>/scratch)")
    ap.add_argument("--cpu", action="store_true", help="CPU mode (tiny models) even where CUDA is available")
    ap.add_argument("--limit", type=float, default=600.0, help="the phase's time limit in seconds")
    ap.add_argument("what", choices=("phase", "summary"))
    ap.add_argument("name", nargs="?", choices=PHASES)
    args = ap.parse_args(argv)
    out = args.out.resolve()
    global _WORK
    _WORK = args.work.resolve() if args.work else None
    if args.what == "summary":
        return summary(out)
    if args.name is None:
        ap.error("phase needs a NAME")
    return run_phase(out, args.name, args.cpu, args.limit)


if __name__ == "__main__":
    sys.exit(main())
