"""The scheduler: request state, batch planning, sampling and the process that runs the loop."""
