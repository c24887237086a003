"""Tests of the model loader: GGUF (synthetic and embedded), safetensors, tokenizers, caches."""
