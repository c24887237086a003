"""Our layers' calls run `forward` directly (runtime/layers/module.py): hooks are refused, not
silently skipped, and every module of a built model is one of ours."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
import torch
from torch import nn

from sglang.runtime.layers.module import Module
from sglang.runtime.layers.norm import RMSNorm


def test_a_hook_is_refused() -> None:
    norm = RMSNorm(8, 1e-6, torch.float32)
    with pytest.raises(NotImplementedError, match="hooks never run"):
        norm.register_forward_hook(lambda *_: None)
    with pytest.raises(NotImplementedError, match="hooks never run"):
        norm.register_forward_pre_hook(lambda *_: None)


def test_a_call_is_its_forward() -> None:
    norm = RMSNorm(8, 1e-6, torch.float32)
    x = torch.randn(3, 8)
    assert torch.equal(norm(x), norm.forward(x))


def test_every_layer_and_model_class_calls_forward_directly() -> None:
    # A class deriving from nn.Module itself would bring back torch's per-call hook bookkeeping.
    import sglang.runtime.layers as layers
    import sglang.runtime.models as models

    classes = []
    for package in (layers, models):
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(info.name)
            classes += [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == info.name]
    modules = [c for c in classes if issubclass(c, nn.Module)]
    assert len(modules) >= 10
    assert [c.__name__ for c in modules if not issubclass(c, Module)] == []
