"""The rocm platform package; see `platform.RocmPlatform`."""
