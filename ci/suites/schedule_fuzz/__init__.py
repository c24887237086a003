"""The differential schedule fuzzer (issue 22 item 4): hypothesis-generated workloads through the
in-process `sglang.Engine` on every backend this machine runs, each held to the reference ops
run with capture off and one request at a time.

- `fuzz_model`: the tiny random Llama the fuzzer serves, with the embedded model's tokenizer;
- `workload`: typed requests and workloads, and how each is submitted;
- `strategies`: hypothesis strategies that draw workloads within a per-target budget;
- `targets`: the backends (platform, kernel families, capture on or off) and their engines;
- `driver`: submits a workload's requests concurrently and records what came back;
- `oracle`: the reference answers and the token-exact comparison, near ties excepted;
- `invariants`: every request finishes exactly once and every KV slot comes back;
- `checker`: one workload run on one target and judged by the oracle and the invariants;
- `regressions`: fixed schedules every target runs (past crashes, shrunk fuzzer finds).
"""
