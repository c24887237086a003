"""The repository's tests: one package per area, so sibling helpers import relatively and no
test edits `sys.path`."""
