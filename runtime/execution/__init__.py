"""Running the model: `model_runner.ModelRunner` owns the KV buffers and the attention backend and
runs every step through the one `StepRunner` its platform chose (the contract is in
`sglang.ops.step`; the runners in `sglang.platforms.execution`)."""
