"""The package's own module graph: which ``step_hdl`` modules a module imports, and their layers.

Two users: the Verilog cache (:func:`fingerprint` of every module the hardware
generator can read, so a change to any of them never reuses stale Verilog) and
the layering test (``tests/test_layers.py``: a module's folder gives its layer,
no module imports a module of a higher layer, no modules import one another in
a cycle, and no module uses another's private names).

Imports are read from the source text (:mod:`ast`), function-level ones
included, so a lazily imported module counts like any other.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from functools import lru_cache
from pathlib import Path

from .cycles import cycles

#: the folders of the repository and their layers, lowest first: a module may import a module of its own layer or
#: a lower one (``sim`` and ``fpga`` are peers and import neither each other). A module's layer is its folder's
#: (the longest folder here its file is in), so the layout says what each module may use.
FOLDERS = {"step_hdl": "language", "units": "units", "mapper": "mapper", "sim/model": "model", "sim": "sim",
           "fpga": "fpga", "step_hdl/flow": "flow"}
LAYERS = {"language": 0, "units": 1, "mapper": 2, "model": 3, "sim": 4, "fpga": 4, "flow": 5}
#: the hardware folders at the repository's top level that import as ``step_hdl.<folder>`` (pyproject.toml)
HARDWARE = ("units", "mapper", "sim", "fpga")


def repository() -> Path:
    """The folder that holds ``step_hdl/`` and the hardware folders (a source checkout)."""
    import step_hdl
    return Path(step_hdl.__file__).resolve().parent.parent


def folder_of(module: str) -> str:
    """The folder of ``module``'s file, relative to the repository (``sim/model`` for ``step_hdl.sim.model.core``)."""
    return source_file(module).resolve().parent.relative_to(repository()).as_posix()


def layer_of(module: str) -> str:
    """The layer of a ``step_hdl`` module: its folder's (:data:`FOLDERS`, the longest folder that holds it)."""
    folder = folder_of(module)
    best = max((f for f in FOLDERS if folder == f or folder.startswith(f + "/")), key=len, default=None)
    if best is None:
        raise ValueError(f"{module} is in {folder}/, which has no layer (sources.FOLDERS)")
    return FOLDERS[best]


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


def _import_nodes(module: str, tree=None):
    """``(target module, names, node)`` of every import statement in ``module``'s text, relative ones
    resolved."""
    path = source_file(module)
    package = module if _is_package(module) else module.rpartition(".")[0]
    for node in ast.walk(tree or ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, (), node
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target, tuple(a.name for a in node.names), node


def _imports(module: str):
    """``(target module, names)`` of every import statement in ``module``'s text, relative ones resolved."""
    for target, names, _ in _import_nodes(module):
        yield target, names


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
    """Every module of the installed ``step_hdl`` package and its subpackages, the hardware folders' included."""
    import pkgutil
    import step_hdl
    out = set()
    todo = [("step_hdl", step_hdl.__path__)] + [(f"step_hdl.{h}", None) for h in HARDWARE]
    while todo:
        name, path = todo.pop()
        if path is None:
            f = source_file(name)
            if f is None:
                continue
            path = [str(f.parent)]
        out.add(name)
        for info in pkgutil.iter_modules(path):
            sub = f"{name}.{info.name}"
            if info.ispkg:
                todo.append((sub, None))
            else:
                out.add(sub)
    return sorted(out)


def import_cycles() -> list[list[str]]:
    """Every cycle of modules that import one another (function-level imports included), each as its modules
    sorted; a package's ``__init__`` importing its own modules is no cycle unless one of them imports it back."""
    modules = package_modules()
    known = set(modules)
    return sorted(sorted(c) for c in cycles({m: sorted(d for d in imports_of(m) if d in known and d != m)
                                             for m in modules}))


def private_imports() -> list[str]:
    """Every use of another module's private name (``from m import _x``, or ``m._x`` on an imported module), as
    ``"importer -> module._name"``: what a module keeps private stays in it."""
    bad = []
    for m in package_modules():
        path = source_file(m)
        tree = ast.parse(path.read_text(), str(path))
        aliases = {}
        for target, names, node in _import_nodes(m, tree):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    full = f"{target}.{a.name}"
                    if source_file(full) is not None:
                        aliases[a.asname or a.name] = full
                    elif a.name.startswith("_") and not a.name.startswith("__") and target != m \
                            and target.split(".")[0] == "step_hdl":
                        bad.append(f"{m} -> {target}.{a.name}")
            else:
                for a in node.names:
                    if a.asname:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in aliases and node.attr.startswith("_") and not node.attr.startswith("__"):
                if aliases[node.value.id].split(".")[0] == "step_hdl" and aliases[node.value.id] != m:
                    bad.append(f"{m} -> {aliases[node.value.id]}.{node.attr}")
    return sorted(set(bad))


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
