"""The jax kernel family: ops written in jax.numpy (Pallas on a real TPU), called from torch."""
