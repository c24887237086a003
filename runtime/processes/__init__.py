"""The engine's processes and what they say to each other.

- `launch`: starts the scheduler, detokenizer and tensor-parallel ranks, waits for their
  readiness, and supervises them (a dead child or a hung step ends the engine);
- `step_monitor`: the scheduler's step heartbeat and the parent's watch over it;
- `tokenizer_manager` (in the server's process): validates, tokenizes, tracks requests and
  builds the outputs users see; `kv_concat_request` is its half of `/concat_and_append`;
- `detokenizer` (its own process): incremental detokenization and stop strings;
- `messages`, `control`: the typed messages between processes; `ipc`: ZeroMQ sockets;
- `child_setup`: what every child process does first (logging, signals).
"""
