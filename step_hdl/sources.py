"""The package's own module graph: which ``step_hdl`` modules a module imports, and their layers.

Two users: the Verilog cache (:func:`fingerprint` of every module the hardware
generator can read, so a change to any of them never reuses stale Verilog) and
the layering test (``tests/test_layers.py``: no module imports a module of a
higher layer).

Imports are read from the source text (:mod:`ast`), function-level ones
included, so a lazily imported module counts like any other.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from functools import lru_cache
from pathlib import Path

#: layer of each subpackage, lowest first; a module may import only its own layer or lower ones
LAYERS = {"language": 0, "units": 1, "mapper": 2, "sim": 3, "fpga": 3, "top": 4}
#: the top layer: the command line, the flow API that joins mapping, emission and simulation, the run report
#: that reads all of them, and the sweeps that run them
TOP_MODULES = ("step_hdl.cli", "step_hdl.flow", "step_hdl.report")
TOP_PACKAGES = ("step_hdl.sweep",)


def layer_of(module: str) -> str:
    """``language``, ``units``, ``mapper``, ``sim``, ``fpga`` or ``top`` for a ``step_hdl`` module name."""
    if module in TOP_MODULES or any(module == p or module.startswith(p + ".") for p in TOP_PACKAGES):
        return "top"
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS and parts[1] not in ("language", "top"):
        return parts[1]
    return "language"


@lru_cache(maxsize=None)
def source_file(module: str) -> Path | None:
    """The ``.py`` file of a ``step_hdl`` module (``None`` if it is not one of ours)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _is_package(module: str) -> bool:
    f = source_file(module)
    return f is not None and f.name == "__init__.py"


def _imports(module: str):
    """``(target module, names)`` of every import statement in ``module``'s text, relative ones resolved."""
    path = source_file(module)
    package = module if _is_package(module) else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target, tuple(a.name for a in node.names)


def unresolved_imports() -> list[str]:
    """Every ``step_hdl`` import (lazy ones included) that names no module: a lazy import that would fail only
    when its function runs."""
    bad = []
    for m in package_modules():
        for target, _ in _imports(m):
            if target.split(".")[0] == "step_hdl" and source_file(target) is None:
                bad.append(f"{m}: {target}")
    return bad


@lru_cache(maxsize=None)
def imports_of(module: str) -> frozenset[str]:
    """The ``step_hdl`` modules ``module`` imports anywhere in its text (``from X import name`` counts ``X``,
    and ``X.name`` when that is a module)."""
    if source_file(module) is None:
        return frozenset()
    out = set()
    for target, names in _imports(module):
        for name in (target, *(f"{target}.{n}" for n in names)):
            if name.split(".")[0] == "step_hdl" and source_file(name) is not None:
                out.add(name)
    out.discard(module)
    return frozenset(out)


def closure(modules) -> set[str]:
    """``modules`` and every ``step_hdl`` module they import, transitively."""
    seen, todo = set(), list(modules)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += imports_of(m)
    return seen


def fingerprint(modules) -> str:
    """Hash of the source text of ``modules`` and everything they import (sorted by module name)."""
    h = hashlib.sha256()
    for m in sorted(closure(modules)):
        h.update(m.encode())
        h.update(source_file(m).read_bytes())
    return h.hexdigest()[:10]


def package_modules() -> list[str]:
    """Every module of the installed ``step_hdl`` package and its subpackages."""
    import step_hdl
    out = []
    roots = {"step_hdl": Path(step_hdl.__file__).parent}
    for sub in ("ops", "units", "mapper", "sim", "fpga", "workloads", "sweep"):
        f = source_file(f"step_hdl.{sub}")
        if f is not None:
            roots[f"step_hdl.{sub}"] = f.parent
    for prefix, folder in roots.items():
        for f in sorted(folder.glob("*.py")):
            out.append(prefix if f.name == "__init__.py" else f"{prefix}.{f.stem}")
    return sorted(set(out))


def upward_imports() -> list[str]:
    """Every import that points up a layer, as ``"importer (layer) -> imported (layer)"``; ``sim`` and
    ``fpga`` are peers and must not import each other either."""
    bad = []
    for m in package_modules():
        lm = layer_of(m)
        for dep in sorted(imports_of(m)):
            ld = layer_of(dep)
            if LAYERS[ld] > LAYERS[lm] or (ld != lm and LAYERS[ld] == LAYERS[lm]):
                bad.append(f"{m} ({lm}) -> {dep} ({ld})")
    return bad
