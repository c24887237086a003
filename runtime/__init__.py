"""The serving runtime: everything between a request and the ops, platform-neutral.

- `engine`: `sglang.Engine`, the runtime in-process; `server_args`: every setting (flags = kwargs);
- `requests/`: what a request is: the native generate input, sampling parameters, stop regexes,
  upstream's accepted fields, finish reasons and meta info;
- `processes/`: the processes and their messages: launch and supervision (`launch`,
  `step_monitor`), the tokenizer manager, the detokenizer, ZeroMQ plumbing and the typed
  messages (`messages`, `control`);
- `server/`: the HTTP APIs (native, OpenAI) over the tokenizer manager;
- `observability/`: OpenTelemetry spans of request stages, Prometheus metrics (upstream's names);
- `scheduler/`: the scheduling loop, request state, batches, sampling, grammar;
- `memory/`: the KV pool's bookkeeping: the token allocator and the radix (prefix) cache;
- `execution/`: the model runner, which owns the KV buffers and runs steps through the
  platform's step runner (the step contract itself is `sglang.ops.step`);
- `models/`, `layers/`: the one decoder, its architectures and building blocks;
- `loader/`: model sources (Hugging Face folders, GGUF, the embedded model), tokenizers, and
  selecting the platform and ops for a model;
- `distributed/`: tensor parallelism across ranks.
"""
