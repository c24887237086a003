"""Speculative decoding: drafts proposed for decoding requests and verified by the target model
in one extend step through the step contract (`sglang.ops.step`); see `speculator`."""
