"""Names a package exports, imported when first used (PEP 562), so that importing the package stays cheap:
``step_hdl`` must not pull in sympy inside a simulator's embedded Python, and the command line reads the
workload registry without building any graph."""

from __future__ import annotations

import sys
import types
from importlib import import_module


def lazy_exports(package: str, exports: dict, namespace: dict):
    """``(__getattr__, __dir__)`` for package ``package`` whose names ``exports`` maps module -> names;
    ``namespace`` is the package's ``globals()`` (a name, once imported, is kept there)."""
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name):
        if name in where:
            value = getattr(import_module(f".{where[name]}", package), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(namespace) | set(where))

    # a name that is also its module's (``workloads.swiglu``, the function, in ``workloads/swiglu.py``): when the
    # import system binds the submodule to the package, the package keeps the function, as an eager
    # ``from .swiglu import swiglu`` in ``__init__`` did
    same = {name for name, module in where.items() if name == module}
    if same:
        pkg = sys.modules[package]

        class Package(type(pkg)):
            def __setattr__(self, name, value):
                if name in same and isinstance(value, types.ModuleType):
                    value = getattr(value, name)
                super().__setattr__(name, value)
        pkg.__class__ = Package
    return __getattr__, __dir__
