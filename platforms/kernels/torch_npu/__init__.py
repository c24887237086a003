"""The torch_npu kernel family: Ascend fused operators through `torch_npu`."""
