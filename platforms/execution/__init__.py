"""The step runners a platform hands the model runner (the contract is `sglang.ops.step`).

- `eager.EagerStepRunner`: plans attention and runs the model, every step;
- `captured.CapturedStepRunner`: decode batches that fit a bucket and its static buffers replay
  a step the device runtime made static once (CUDA/NPU graphs, cpu's traced steps); every other
  step runs eagerly;
- the tpu platform's `JitStepRunner` (`platforms/tpu/jit_step.py`): every step is a jitted JAX
  function over donated KV buffers.

`Platform.step_runner` chooses among them from the platform's declared `StepExecution`.
"""
