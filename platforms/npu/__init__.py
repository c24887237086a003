"""The npu platform package; see `platform.NpuPlatform`."""
