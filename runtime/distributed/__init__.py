"""Tensor parallelism: the rank group layers shard by, rank placement and processes, the leader
that broadcasts every model call to the other ranks, and the followers that replay them."""
