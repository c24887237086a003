"""The torch_native kernel family: torch code that runs on any torch device (see `family`)."""
