"""The xpu platform package; see `platform.XpuPlatform`."""
