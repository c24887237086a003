"""The one rule of import direction between the package's layers, checked mechanically.

`frontend/`, `runtime/`, `ops/` and `sglang/` must not import a vendor package (statically, or
dynamically by name) nor branch on a device name: device facts reach them only as the selected
`Platform` and its capabilities. Only `platforms/<dev>/` and the kernel families in
`platforms/kernels/<family>/` touch vendor packages, lazily, so the registry, every platform
module and every family's declaration import on a machine that has none of them. A kernel family
never names a device: the platforms that list it do.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED_DIRS = ("frontend", "runtime", "ops", "sglang")
VENDOR_MODULES = (
    "torch.cuda",
    "torch.xpu",
    "torch.npu",
    "torch.mps",
    "torch.backends.cuda",
    "torch.backends.cudnn",
    "torch_npu",
    "torch_xla",
    "flashinfer",
    "triton",
    "aiter",
    "intel_extension_for_pytorch",
    "jax",
    "jaxlib",
    "torchax",
    "sgl_kernel",
    "vllm",
)
VENDOR_ATTRIBUTES = ("torch.version.cuda", "torch.version.hip")
DEVICE_NAMES = frozenset({"cuda", "rocm", "xpu", "npu", "tpu", "hip"})
DEVICE_FLAGS = frozenset({"is_cuda", "is_xpu", "is_npu", "is_hip", "is_rocm", "is_tpu", "is_mps"})
DYNAMIC_IMPORTERS = frozenset({"import_module", "__import__", "find_spec"})


def is_vendor(name: str) -> bool:
    return any(name == v or name.startswith(v + ".") for v in VENDOR_MODULES + VENDOR_ATTRIBUTES)


def names_device(node: ast.AST) -> bool:
    """A string constant naming a device (`"cuda"`, `"cuda:0"`), alone or inside a literal collection."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.lower().split(":")[0] in DEVICE_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(names_device(e) for e in node.elts)
    return False


def dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


class ContractVisitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.violations: list[tuple[int, str]] = []
        self.torch_aliases = {"torch"}

    def flag(self, node: ast.AST, message: str) -> None:
        self.violations.append((node.lineno, message))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if is_vendor(alias.name):
                self.flag(node, f"imports vendor package {alias.name}")
            if alias.name == "torch" and alias.asname:
                self.torch_aliases.add(alias.asname)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            if is_vendor(module) or (node.level == 0 and is_vendor(f"{module}.{alias.name}")):
                self.flag(node, f"imports vendor package {module}.{alias.name}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = dotted(node)
        if name:
            root, _, rest = name.partition(".")
            if root in self.torch_aliases:
                name = f"torch.{rest}" if rest else "torch"
            if name.startswith("torch.") and is_vendor(name):
                self.flag(node, f"uses {name}")
                return  # the chain's inner attributes would repeat the finding
        if node.attr in DEVICE_FLAGS:
            self.flag(node, f"branches on .{node.attr}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        first = node.args[0] if node.args else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            if called in DYNAMIC_IMPORTERS and is_vendor(first.value):
                self.flag(node, f"imports vendor package {first.value} by name")
            if called in ("startswith", "endswith") and names_device(first):
                self.flag(node, f"branches on device name {first.value!r}")
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if any(names_device(side) for side in (node.left, *node.comparators)):
            self.flag(node, "compares against a device name")
        self.generic_visit(node)

    def visit_MatchValue(self, node: ast.MatchValue) -> None:
        if names_device(node.value):
            self.flag(node, "matches a device name")
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        if any(key is not None and names_device(key) for key in node.keys):
            self.flag(node, "keys a table by device name")
        self.generic_visit(node)


def violations(source: str) -> list[tuple[int, str]]:
    visitor = ContractVisitor()
    visitor.visit(ast.parse(source))
    return visitor.violations


def checked_files() -> list[Path]:
    return sorted(p for d in CHECKED_DIRS for p in (ROOT / d).rglob("*.py"))


def test_core_code_keeps_the_rule_of_direction() -> None:
    files = checked_files()
    assert any(p.parts[-2:] == ("ops", "attention.py") for p in files), "the walk found no source"
    found = [
        f"{path.relative_to(ROOT)}:{line}: {message}"
        for path in files
        for line, message in violations(path.read_text())
    ]
    assert not found, "vendor imports or device branches outside platforms/:\n" + "\n".join(found)


BAD = {
    "import": "import triton",
    "import_submodule": "import flashinfer.decode",
    "import_from": "from torch_npu.contrib import transfer_to_npu",
    "from_torch": "from torch import cuda",
    "torch_cuda_call": "import torch\ntorch.cuda.synchronize()",
    "aliased_torch": "import torch as T\nfree, total = T.cuda.mem_get_info()",
    "version_hip": "import torch\nrocm = torch.version.hip is not None",
    "from_version": "from torch.version import cuda",
    "dynamic_import": "import importlib\njax = importlib.import_module('jax')",
    "probe": "import importlib.util\nhas_ipex = importlib.util.find_spec('intel_extension_for_pytorch')",
    "compare": "if device.type == 'cuda':\n    pass",
    "compare_reversed": "use_graphs = 'npu' != name",
    "membership": "if device in ('cuda', 'rocm'):\n    pass",
    "device_index": "on_first = str(device) == 'cuda:0'",
    "startswith": "if name.startswith('xpu'):\n    pass",
    "is_cuda": "if tensor.is_cuda:\n    pass",
    "match": "match platform:\n    case 'tpu':\n        pass",
    "table": "BLOCK = {'cuda': 128, 'cpu': 32}[device]",
}


def test_kernel_families_never_name_a_device() -> None:
    files = sorted((ROOT / "platforms" / "kernels").rglob("*.py"))
    assert files, "the walk found no kernel family"
    found = [
        f"{path.relative_to(ROOT)}:{line}: {message}"
        for path in files
        for line, message in violations(path.read_text())
        if not message.startswith(("imports", "uses"))
    ]
    assert not found, "device branches inside kernel families:\n" + "\n".join(found)


LOWER_LAYERS = ("ops", "platforms")
"""Layers below the runtime (DESIGN.md section 3): they never import `sglang.runtime` (nor the
frontend), statically or lazily inside a function, so a platform can be built, tested and
shipped without the runtime, and the step contract they share with it lives in `sglang.ops`."""
UPPER_PACKAGES = ("sglang.runtime", "sglang.frontend")


def upward_imports(source: str) -> list[tuple[int, str]]:
    """Every import of an upper layer in `source`, anywhere in the file (type-only imports too:
    a name used in an annotation is a dependency on that layer all the same)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        for name in names:
            if any(name == up or name.startswith(up + ".") for up in UPPER_PACKAGES):
                found.append((node.lineno, f"imports {name}"))
    return found


def test_lower_layers_never_import_the_runtime() -> None:
    files = sorted(p for d in LOWER_LAYERS for p in (ROOT / d).rglob("*.py"))
    assert any(p.parts[-2:] == ("base.py",) or p.name == "base.py" for p in files), "the walk found no platform"
    found = [
        f"{path.relative_to(ROOT)}:{line}: {message}"
        for path in files
        for line, message in upward_imports(path.read_text())
    ]
    assert not found, "ops/ or platforms/ import an upper layer:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "from sglang.runtime.execution.model_runner import StepInputs",
        "import sglang.runtime.loader.cache",
        "def f():\n    from sglang.runtime import engine",
        "if TYPE_CHECKING:\n    from sglang.frontend.ir import Program",
    ],
)
def test_upward_import_check_catches(source: str) -> None:
    assert upward_imports(source)


def test_upward_import_check_allows_lower_layers() -> None:
    assert upward_imports("from sglang.ops.step import StepInputs\nimport sglang.platforms.base") == []


GOOD = {
    "platform_object": "device = platform.device()\nif platform.capabilities.graph_capture:\n    pass",
    "docstring": '"""Runs on cuda, rocm or tpu: see platforms/."""',
    "log_message": "logger.info('selected %s (cuda-like)', name)",
    "torch_generic": "import torch\nx = torch.zeros(3, device=device)\ntorch.version.__version__",
    "cpu_is_fine": "if device.type == 'cpu':\n    pass",
    "lookalike": "if name == 'cudagraph_bs':\n    pass",
}


@pytest.mark.parametrize("case", BAD)
def test_checker_catches(case: str) -> None:
    assert violations(textwrap.dedent(BAD[case])), f"missed: {BAD[case]!r}"


@pytest.mark.parametrize("case", GOOD)
def test_checker_allows(case: str) -> None:
    assert violations(GOOD[case]) == []


IMPORT_WITHOUT_VENDORS = """
import importlib, pkgutil, sys
BLOCKED = {blocked!r}
for name in BLOCKED:
    sys.modules[name] = None  # how Python marks a package as absent: import raises, find_spec is None
from sglang.platforms import registry
import sglang.platforms
from sglang.platforms.base import ModelFacts
from sglang.platforms.kernels import registry as families
import torch
for info in pkgutil.iter_modules(sglang.platforms.__path__):
    if info.ispkg and info.name not in ("kernels", "execution"):
        importlib.import_module(f"sglang.platforms.{{info.name}}")
        importlib.import_module(f"sglang.platforms.{{info.name}}.platform")
for name in families.BUILTIN_FAMILIES:
    families.family(name)
for name in registry.BUILTIN_PLATFORMS:
    cls = registry.platform_class(name)
    state = cls.availability()
    assert state.available or state.reason, name
    cls().describe()
    cls().select_ops(ModelFacts(dtype=cls.capabilities.default_dtype)).render()
    print(name, state.available, state.reason)
leaked = sorted(n for n in BLOCKED if sys.modules.get(n) is not None)
assert not leaked, leaked
"""


def test_registry_and_platform_modules_import_without_vendor_packages() -> None:
    blocked = sorted({m.split(".")[0] for m in VENDOR_MODULES if not m.startswith("torch.")})
    script = IMPORT_WITHOUT_VENDORS.format(blocked=blocked)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    reported = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert reported.keys() >= {"cpu", "cuda", "rocm", "xpu", "npu", "tpu"}
    assert reported["npu"] == "False torch_npu is not installed"
    assert reported["tpu"].startswith("False jax is not installed")
