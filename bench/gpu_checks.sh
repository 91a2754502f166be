#!/usr/bin/env bash
# The GPU checks of one lent-GPU session, as one prepared script (issue 39): the reader, the encoder and the
# reranker at the paper's shapes against the device's bf16 peak, then the candidate fixes, each phase under its own
# time limit so a slow one leaves the others' numbers. Logs and JSON go to $OUT (default bench/out/gpu_checks).
#
#   bash bench/gpu_checks.sh            # on the GPU machine, from the repository root
#
# faiss is not on the device image: carry a faiss-cpu wheel in .whl/ (bench/README, "The paper's scale on one GPU").
set -u
OUT=${OUT:-bench/out/gpu_checks}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-}
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
export PYTHONPATH=$PWD:$PYTHONPATH
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv; \
  python3 -c "import torch, transformers, faiss; print('torch', torch.__version__, 'transformers', transformers.__version__, 'faiss', faiss.__version__)"; \
  echo "commit ${GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"; } | tee "$OUT/env.txt"

phase() {  # phase NAME SECONDS ARGS...: one benchmark run under its own limit, log and JSON in $OUT
    local name=$1 limit=$2; shift 2
    echo "== $name (limit ${limit}s): $*"
    timeout "$limit" python3 bench/bench_gpu_scale.py "$@" --out "$OUT/$name.json" 2>&1 \
        | grep -v -e "Warning" -e "warnings.warn" -e "^ *warn(" | tee "$OUT/$name.log"
    echo "== $name: exit ${PIPESTATUS[0]}"
}

case ${1:-first} in
first)  # the first run of issue 39
    # 1. the issue's command (every reader variant profiled), plus pgra's own training loop around the same step
    phase issue 300 --rerankers=opt-13b --readers=t5-base --reader-variants eager,fused,compile,fused+compile \
        --loop-variants fused+compile --profile 5
    # 2. CUDA graphs on top of the fastest compiled step (host launch overhead), against that step in the same process
    phase cudagraphs 100 --encode-sentences 20000 --index-vectors 10000 --rerankers= --readers=t5-base \
        --reader-variants fused+compile,fused+compile+cudagraphs --profile 3
    # 3. the reranker's token budget: shared-prefix attention holds only each row's own keys and values
    phase rerank_budget 60 --encode-sentences 20000 --index-vectors 10000 --rerankers=opt-13b --rerank-kv-gib 64 \
        --readers=
    ;;
fixes)  # the second run: the fixes the first run's profile pointed to, 20 timed steps each
    # 4. pgra's loop reading each step's loss once the next step is queued, beside the bare step (20 steps each)
    phase loop 270 --encode-sentences 20000 --index-vectors 10000 --rerankers= --readers=t5-base --steps 20 \
        --warmup-steps 3 --reader-variants fused+compile,fused+compile+cudagraphs \
        --loop-variants fused+compile,fused+compile+cudagraphs
    # 5. encoding at steady state (the second pass over the same sentences), batches of 512 and 2,048 sentences
    phase encode512 45 --encode-sentences 100000 --index-vectors 10000 --rerankers= --readers=
    phase encode2048 45 --encode-sentences 100000 --encode-batch 2048 --index-vectors 10000 --rerankers= --readers=
    ;;
*) echo "usage: bash bench/gpu_checks.sh [first|fixes]"; exit 2 ;;
esac
