"""Import-time stand-ins for GPU-only packages, so vLLM's model modules import on a CPU-only interpreter.

Only `torchvision` is stubbed: PyPI's torchvision wheels are CUDA builds whose `_C.so` needs `libtorch_cuda.so`, so
they cannot import beside the CPU torch wheel. vLLM's Qwen3-VL / Qwen3.5 model modules (needed for their
`hf_to_vllm_mapper` and `packed_modules_mapping`) import transformers' Qwen2-VL image processor, which imports
`torchvision.transforms.v2.functional` at module level. Nothing here is ever called by the conformance run: no image
is processed and no model is built. Any call of a stub raises, so a stub can never silently stand in for real
behaviour.

setup.sh copies this file into the side venv's site-packages and adds a `.pth` line that calls `install()`, so the
stand-in is also present in the subprocess vLLM's model registry spawns to inspect a model class.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

STUBBED = ("torchvision",)


class _Unavailable:
    """Stands in for any torchvision attribute; importing it works, using it raises."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args: object, **kwargs: object) -> object:
        raise RuntimeError(f"{self._name} is a CPU import stub (bench/conformance/cpu_stubs.py); it cannot run")

    def __getattr__(self, attr: str) -> _Unavailable:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{self._name}.{attr}")

    def __getitem__(self, item: object) -> _Unavailable:
        return self

    def __mro_entries__(self, bases: tuple) -> tuple:
        # `class X(torchvision.Something)` must still define a class.
        return (object,)


class _StubModule(types.ModuleType):
    def __getattr__(self, attr: str) -> _Unavailable:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{self.__name__}.{attr}")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: object, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".", 1)[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []  # a package, so any submodule imports through this finder too
        module.__version__ = "0.0.0+cpu-stub"
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install() -> None:
    """Put the stub finder first on sys.meta_path (idempotent)."""
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder())
