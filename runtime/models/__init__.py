"""Model architectures, all instances of one decoder written against `sglang.ops`.

- `config`: the model's configuration, parsed from a Hugging Face `config.json` or a GGUF;
- `decoder`: the one decoder every architecture declares itself as (`llama`, `qwen`, `mixture`);
- `registry`: architecture name -> model class (import `model_class_for` from there);
- `weights`: checkpoint tensor names mapped onto the decoder's parameters.

Nothing is imported here, so `layers` can use `models.config` without importing the decoder.
"""
