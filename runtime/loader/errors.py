"""Errors the loading layer raises.

Every message names the file (and the tensor, where one is involved) so that a user can act on it
without a traceback: which checkpoint is broken, which shard is missing, what to install.
"""

from __future__ import annotations


class ModelLoadError(RuntimeError):
    """Base class: the model source cannot be opened or read."""


class CorruptCheckpointError(ModelLoadError):
    """A checkpoint file is truncated, malformed, or disagrees with its index."""


class MissingFileError(ModelLoadError):
    """A file the checkpoint needs (config, shard, weights) is absent."""


class UnsupportedModelError(ModelLoadError):
    """The checkpoint is well formed but uses an architecture or feature this loader does not handle."""


class EmbeddedModelMissingError(ModelLoadError):
    """No model path was given and the package holding the embedded default model is not installed."""
