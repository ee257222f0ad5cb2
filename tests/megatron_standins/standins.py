"""Stand-ins for the GPU-only packages Megatron-SWIFT's argument classes import (used by tests/megatron_oracle.py
only, never by grpo-ui): NVIDIA Transformer Engine and Triton have no CPU build, yet mcore-bridge imports Transformer
Engine at import time, Megatron-Core's extensions subclass its layers and mcore-bridge's kernels import Triton.
``install()`` makes every ``transformer_engine.*`` / ``triton.*`` module on demand, each name in it a placeholder
class. Nothing here computes: the oracle only parses arguments and runs their ``__post_init__`` checks, with
distributed initialisation stubbed."""

import importlib.abc
import importlib.machinery
import sys
import types

PACKAGES = ("transformer_engine", "triton")
VERSIONS = {"transformer_engine": "2.8.0", "triton": "3.4.0"}


class _Any(type):
    """The placeholders' type: any attribute of a placeholder class is another placeholder class."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any(name, (Placeholder,), {})

    def __or__(cls, other):  # type hints such as te.X | None
        return cls

    __ror__ = __or__

    def __getitem__(cls, item):  # type hints such as tl.constexpr[int]
        return cls


class Placeholder(metaclass=_Any):
    """Any class, function or decorator of a stood-in package: subclassable, callable, with any attribute."""

    def __init__(self, *args, **kwargs):
        pass

    def __init_subclass__(cls, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else Placeholder()

    def __getattr__(self, name):
        return Placeholder()

    def __bool__(self):
        return False


def _decorator_or_class(name):
    """A module-level name: a placeholder class, which as a decorator (``@triton.jit``) returns what it wraps."""
    return _Any(name, (Placeholder,), {"__new__": lambda cls, *a, **k: a[0] if len(a) == 1 and callable(a[0])
                                       and not k else object.__new__(cls)})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, packages):
        self.packages = packages

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in self.packages:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__version__ = VERSIONS[spec.name.split(".")[0]]

        def __getattr__(name, _module=spec.name):
            if name.startswith("__"):
                raise AttributeError(name)
            value = _decorator_or_class(name)
            setattr(sys.modules[_module], name, value)
            return value
        module.__getattr__ = __getattr__
        return module

    def exec_module(self, module):
        pass


def install():
    """Put the stand-ins before any real import path: Transformer Engine at once; Triton only after Megatron-Core
    has been imported (its fused kernels call torch.compile at import time, and torch's compiler takes a Triton that
    is there for the real one)."""
    sys.meta_path.insert(0, _Finder(("transformer_engine",)))
    import megatron.core  # noqa: F401
    sys.meta_path.insert(0, _Finder(("triton",)))
