"""The tpu platform on XLA:CPU next to cpu, same model, same run: startup, compiles, decode speed.

Each measurement is a fresh process (`--child`): it loads the embedded model in fp32, builds the
model runner, prefills the chat prompt and decodes greedily at batch 1 and batch 8 (the runner
only, no server: what differs between the two platforms). The tpu platform runs twice over one
fresh persistent compilation cache: the first start compiles every step shape, the second should
find them all in the cache. XLA:CPU is expected to be slower than torch on this CPU; the figure
is for the record, not a target.

    .venv/bin/python benchmarks/bench_tpu_xla_cpu.py [--new-tokens 32]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def child(device: str, new_tokens: int) -> dict:
    import torch

    from sglang.ops.attention import AttentionInputs
    from sglang.runtime.execution.model_runner import ModelRunner, StepInputs, attention_backend_for
    from sglang.runtime.loader.model_loading import load_model
    from sglang.runtime.server_args import ServerArgs

    started = time.perf_counter()
    loaded = load_model(ServerArgs(device=device, dtype="float32", cpu_threads=1))
    runner = ModelRunner(loaded.model, loaded.platform, 4096, attention_backend_for(loaded.model, loaded.platform))
    ready = time.perf_counter() - started
    tokenizer = loaded.load_tokenizer()
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    next_slot = iter(range(1, 4096))

    def run(batch: int, steps: int) -> tuple[float, float]:
        """(seconds of the prefill step, decode tokens/s over `steps` steps after the first)."""
        slots = [[next(next_slot) for _ in prompt] for _ in range(batch)]
        n = len(prompt)
        t0 = time.perf_counter()
        inputs = AttentionInputs((n,) * batch, (n,) * batch, torch.tensor([x for s in slots for x in s]))
        ends = torch.arange(1, batch + 1) * n - 1
        logits = runner.forward(StepInputs(torch.tensor(prompt * batch), torch.arange(n).repeat(batch), inputs, ends))
        prefill = time.perf_counter() - t0
        tokens, timed_from = logits.argmax(-1), None
        for step in range(steps + 1):
            if step == 1:
                timed_from = time.perf_counter()
            for s in slots:
                s.append(next(next_slot))
            length = len(slots[0])
            inputs = AttentionInputs((length,) * batch, (1,) * batch, torch.tensor([x for s in slots for x in s]))
            step_in = StepInputs(tokens, torch.full((batch,), length - 1), inputs, torch.arange(batch))
            tokens = runner.forward(step_in).argmax(-1)
        return prefill, batch * steps / (time.perf_counter() - timed_from)

    prefill_1, tps_1 = run(1, new_tokens)
    prefill_8, tps_8 = run(8, new_tokens)
    executor = runner.step_runner
    records = (
        []
        if executor is None
        else [
            {"shape": str(r.shape), "trace_s": round(r.trace_s, 2), "compile_s": round(r.compile_s, 2)}
            for r in executor.records
        ]
    )
    return {
        "device": loaded.platform.describe(),
        "ready_s": round(ready, 2),
        "prefill_s": [round(prefill_1, 2), round(prefill_8, 2)],
        "tokens_per_s": [round(tps_1, 2), round(tps_8, 2)],
        "compiles": records,
        "total_s": round(time.perf_counter() - started, 1),
    }


def measure(device: str, new_tokens: int, env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", device, "--new-tokens", str(new_tokens)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--child", choices=("cpu", "tpu"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.new_tokens)))
        return
    with tempfile.TemporaryDirectory() as cache:
        tpu_env = {**os.environ, "JAX_PLATFORMS": "cpu", "SGLANG_JAX_CACHE_DIR": cache}
        runs = {
            "cpu": measure("cpu", args.new_tokens, dict(os.environ)),
            "tpu first start": measure("tpu", args.new_tokens, tpu_env),
            "tpu second start": measure("tpu", args.new_tokens, tpu_env),
        }
    load = os.getloadavg()[0]
    print(f"load average {load:.1f}; decode tokens/s at batch 1 / batch 8; prefill of the chat prompt")
    for name, r in runs.items():
        compiles = r["compiles"]
        spent = sum(c["trace_s"] + c["compile_s"] for c in compiles)
        speed = "{:6.1f} / {:6.1f} tok/s".format(*r["tokens_per_s"])
        print(
            f"{name:17} {r['device']:24} ready {r['ready_s']:6.1f} s  decode {speed}  "
            f"{len(compiles)} compiles, {spent:.1f} s  total {r['total_s']} s"
        )
        for c in compiles:
            print(f"    {c['shape']}: trace {c['trace_s']} s, compile {c['compile_s']} s")


if __name__ == "__main__":
    main()
