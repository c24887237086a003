"""Kernel families: op implementations grouped by the kernel technology, not by device.

One family serves every platform that lists it (the Triton family serves cuda, rocm and xpu);
a family never names a device. See `registry` for how families are found.
"""
