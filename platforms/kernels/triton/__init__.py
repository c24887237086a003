"""The triton kernel family (see `family`); kernel modules import triton, this package does not."""
