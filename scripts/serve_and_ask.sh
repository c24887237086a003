#!/usr/bin/env bash
# Starts `sglang serve` on the embedded model, waits until it is ready, asks it one chat
# question through the OpenAI API, prints the answer, and keeps serving until Ctrl-C.
#
# The kernels this machine's platform compiles (the cpu C++ kernels) build first, with progress:
# once per machine, and a cached build returns at once; a failed one makes its family ineligible
# and the server serves on the next. Not beside the server's start: on 2 cores both are CPU-bound,
# and side by side they took 117-129 s to the answer against 101 s one after the other (see
# benchmarks/README.md).
#
# Ctrl-C (or TERM) stops the server and the builder: exit 0 once the question was answered,
# 130 when it came during the start.
set -euo pipefail
# Job control: each background command leads its own process group, so stopping the builder's
# group also stops the compiler processes it started.
set -m
PORT="${PORT:-30000}"
QUESTION="${QUESTION:-What is the capital of France?}"
SGLANG="${SGLANG:-.venv/bin/sglang}"

builder=""
server=""
answered=0

stop() {
  trap - INT TERM EXIT
  [ -z "$server" ] || kill -TERM "$server" 2>/dev/null || true
  [ -z "$builder" ] || kill -TERM -- "-$builder" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap 'stop; [ $answered = 1 ] && exit 0 || exit 130' INT TERM
trap stop EXIT

"$SGLANG" build-kernels >&2 &
builder=$!
wait "$builder" || true
"$SGLANG" serve --port "$PORT" "$@" &
server=$!

for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 "$server" 2>/dev/null || { echo "the server exited during start-up" >&2; exit 1; }
  sleep 1
done

body=$(printf '{"model": "default", "messages": [{"role": "user", "content": "%s"}], "max_tokens": 64, "temperature": 0}' "$QUESTION")
echo "> $QUESTION"
curl -sf "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' -d "$body" \
  | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])'
answered=1
echo "Serving on http://127.0.0.1:$PORT (OpenAI API under /v1, native API at /generate). Ctrl-C stops."
wait "$server"
