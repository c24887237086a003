#!/usr/bin/env bash
# Starts `sglang serve` on the embedded model, waits until it is ready, asks it one chat
# question through the OpenAI API, prints the answer, and keeps serving until Ctrl-C.
set -euo pipefail
PORT="${PORT:-30000}"
QUESTION="${QUESTION:-What is the capital of France?}"
SGLANG="${SGLANG:-.venv/bin/sglang}"

"$SGLANG" serve --port "$PORT" "$@" &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server' INT TERM EXIT

for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $server 2>/dev/null || { echo "the server exited during start-up" >&2; exit 1; }
  sleep 1
done

body=$(printf '{"model": "default", "messages": [{"role": "user", "content": "%s"}], "max_tokens": 64, "temperature": 0}' "$QUESTION")
echo "> $QUESTION"
curl -sf "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' -d "$body" \
  | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])'
echo "Serving on http://127.0.0.1:$PORT (OpenAI API under /v1, native API at /generate). Ctrl-C stops."
wait $server
