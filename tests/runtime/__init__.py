"""Tests of the runtime: scheduler, caches, allocator, sampling, engine (through runtime_harness)."""
