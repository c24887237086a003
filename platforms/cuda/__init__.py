"""The cuda platform package; see `platform.CudaPlatform` and `runtime.CudaRuntime`."""
