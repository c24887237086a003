"""A toy out-of-tree device for sglang: a platform and a kernel family from entry points only.

Its tensors live on the host; its family serves three ops with kernels of its own. Installed as
a package of its own, it shows what a vendor ships to add a device: no change to sglang's code.
`SGLANG_TOY_BROKEN_OP=<op>` makes that op's kernel deliberately wrong, so conformance runs can
show that a broken kernel is caught and named.
"""
