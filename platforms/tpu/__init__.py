"""The tpu platform package; see `platform.TpuPlatform`."""
