"""Results stored under a content hash of everything that determines them, so a re-run of a sweep computes
only new or changed points and an interrupted one resumes where it stopped.

A point's key (:func:`point_key`) hashes its definition (workload, every
parameter, tile, fabric fields, DRAM preset and its timing, evaluations), the
definitions of the points it shares a fabric with, the contents of the trace
files it reads, and the code version of the parts its evaluations run
(:func:`code_version`: the source of the language, and for ``model`` and
``sim`` the mapper's and the simulators', and for ``sim`` the units'). One JSON
file per point, written atomically, so two workers or an interrupted run never
leave half a result.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path

from .spec import SweepPoint

#: the package folders each evaluation's results depend on (besides the language, ``step_hdl``)
_PARTS = {"metrics": (), "model": ("mapper", "sim"), "sim": ("units", "mapper", "sim")}
#: files of the language folder that do not change results: the command line and the sweep's own plumbing
_NOT_RESULTS = ("cli.py", "sweep/cache.py", "sweep/executors.py", "sweep/table.py", "sweep/run.py",
                "sweep/__init__.py")


def cache_root() -> Path:
    """``$STEP_HDL_SWEEP_CACHE``, else ``sweep/`` under the build cache (``$STEP_HDL_BUILD`` or
    ``~/.cache/step-hdl``)."""
    env = os.environ.get("STEP_HDL_SWEEP_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("STEP_HDL_BUILD", Path.home() / ".cache" / "step-hdl")) / "sweep"


@lru_cache(maxsize=None)
def _tree_hash(folder: str, skip: tuple = ()) -> str:
    root = Path(folder)
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in skip or "__pycache__" in rel:
            continue
        h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def code_version(evals) -> str:
    """A hash of the source files the evaluations ``evals`` run (the language, and per evaluation its
    parts); any edit there changes every key that depends on it."""
    import step_hdl
    import step_hdl.mapper
    import step_hdl.sim
    import step_hdl.units
    folders = {"step_hdl": (Path(step_hdl.__file__).parent, _NOT_RESULTS)}
    mods = {"mapper": step_hdl.mapper, "sim": step_hdl.sim, "units": step_hdl.units}
    for e in evals:
        for part in _PARTS[e]:
            folders[part] = (Path(mods[part].__file__).parent, ())
    h = hashlib.sha256()
    for name in sorted(folders):
        folder, skip = folders[name]
        h.update(name.encode() + _tree_hash(str(folder), skip).encode())
    return h.hexdigest()


@lru_cache(maxsize=None)
def _file_hash(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def trace_files(point: SweepPoint) -> list[Path]:
    """The trace files ``point``'s workload reads (none for SwiGLU)."""
    from step_hdl.workloads import traces
    if point.workload == "moe":
        return [traces.traces_dir() / "moe_expert_routing" / f"{point.params['trace']}.npz"]
    if point.workload == "gqa":
        return [traces.kv_trace(point.params["batch"], str(point.params["kv-trace"]))]
    return []


def point_key(point: SweepPoint, peers: tuple = ()) -> str:
    """The content hash of ``point`` (``peers``: the definitions of the points of its fabric group)."""
    from dataclasses import asdict
    from step_hdl.sim.dram_timing import DRAM_PRESETS
    traces = {}
    for path in trace_files(point):
        st = path.stat()
        traces[path.name] = _file_hash(str(path), st.st_mtime_ns, st.st_size)
    blob = json.dumps({"point": point.to_json(), "peers": sorted(peers), "dram": asdict(DRAM_PRESETS[point.dram]),
                       "traces": traces, "code": code_version(point.evals)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


class ResultCache:
    """One JSON file per point key under ``root`` (:func:`cache_root` by default)."""

    def __init__(self, root=None):
        self.root = Path(root) if root is not None else cache_root()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        try:
            return json.loads(self._path(key).read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, result: dict) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(result, f)
        os.replace(tmp, path)
