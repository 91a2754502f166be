#!/usr/bin/env bash
# GPU acceptance of the node path (issue 49), one prepared script: one tiny grid run every way pgra runs it on one
# GPU (one process; torchrun with 2 ranks on the GPU, cells_per_gpu 2; two jobs, one killed mid-cell and resumed;
# a forged takeover from another host; --launcher local --workers 2; the launchers' variables), a ~1.2B OPT loaded
# straight to the GPU, and two reader cells side by side against one after the other. No network, no downloads:
# random-weight models built from configs. Each phase runs under its own time limit (8 minutes in all on an H100 or
# H200); logs, fixtures and JSON go to $OUT (default a new temp folder), and the run ends in a PASS/FAIL table (also
# $OUT/gpu_accept.json and gpu_accept.txt). Exit 0 when every phase passed.
#
#   bash bench/gpu_accept.sh            # on the GPU machine, from the repository root (CPU mode when no CUDA)
#   bash bench/gpu_accept.sh --cpu      # CPU mode: tiny models, the GPU hidden (the test suite runs this)
#
# The logic is bench/gpu_accept.py's. PYTHON picks the interpreter (default python3); faiss or other wheels missing
# on the device image can be carried in .whl/ (as for bench/gpu_checks.sh).
set -u
CPU=""
for arg in "$@"; do
    case $arg in
        --cpu) CPU=--cpu ;;
        *) echo "usage: bash bench/gpu_accept.sh [--cpu]"; exit 2 ;;
    esac
done
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_accept.XXXXXX")}
mkdir -p "$OUT/phases" && OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.." || exit 2
PYTHON=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-}
if ls .whl/*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
echo "gpu_accept: logs and JSON in $OUT (commit ${GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)})"

SCALE=1  # CPU mode: limits x3 (a machine's shared cores start each process slower than a GPU node's)
phase() {  # phase NAME SECONDS: one phase under its own limit; its log in $OUT, its JSON in $OUT/phases
    local name=$1 limit=$(($2 * SCALE))
    echo "== $name (limit ${limit}s)"
    timeout "$limit" "$PYTHON" bench/gpu_accept.py --out "$OUT" $CPU --limit "$limit" phase "$name" 2>&1 \
        | tee "$OUT/$name.log"
    echo "${PIPESTATUS[0]}" > "$OUT/phases/$name.rc"
}

# limits: 475 s in all on a GPU (each phase's expected time on an H100 is about half its limit)
phase env 15
grep -q '"mode": "cpu"' "$OUT/mode.json" 2>/dev/null && SCALE=3
phase fixtures 50
phase reference 40
if [ "$SCALE" -gt 1 ]; then  # CPU mode: two lanes at once, to fill both cores of a small machine (the CPU's
    # side-by-side ratio then says nothing; it says little on a CPU anyway)
    { phase torchrun_shared 50; phase launcher_env 50; phase side_by_side 80; } &
    { phase takeover 60; phase kill_resume 50; phase local_workers 40; phase lm_to_device 40; }
    wait
else  # on the GPU one at a time: each phase's memory and time are its own
    phase torchrun_shared 50
    phase kill_resume 50
    phase takeover 60
    phase local_workers 40
    phase launcher_env 50
    phase lm_to_device 40
    phase side_by_side 80  # alone: its wall-clock ratio
fi
"$PYTHON" bench/gpu_accept.py --out "$OUT" summary
