"""Building blocks models are assembled from; every computation goes through `sglang.ops`."""
