"""The cpu platform package; see `platform.CpuPlatform`."""
