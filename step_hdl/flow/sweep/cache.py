"""Results stored under a content hash of everything that determines them, so a re-run of a sweep computes
only new or changed points and an interrupted one resumes where it stopped.

A point's key (:func:`point_key`) hashes its definition (workload, every
parameter, tile, fabric fields, DRAM preset and its timing, evaluations), the
definitions of the points it shares a fabric with, the contents of the trace
files it reads, and the code version of the parts its evaluations run
(:func:`code_version`: the source of every module each evaluation imports, so
a change to the model keeps the RTL results and the metrics). One JSON
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

from step_hdl.flow.sweep.spec import SweepPoint

#: per evaluation, the modules whose import closure (``step_hdl.sources.closure``, lazy imports included)
#: its results depend on: a change to the model does not invalidate RTL results, nor a unit's metrics
_ENTRIES = {"metrics": ("step_hdl.metrics", "step_hdl.workloads.registry"),
            "model": ("step_hdl.sim.model", "step_hdl.mapper.prepare", "step_hdl.workloads.registry"),
            "sim": ("step_hdl.sim.fabric", "step_hdl.sim.cocotb_fabric", "step_hdl.mapper.prepare",
                    "step_hdl.workloads.registry")}
#: the sweep's own modules that shape a record (not their closure: they import every evaluation lazily)
_RECORD = ("step_hdl.flow.sweep.evaluate", "step_hdl.flow.sweep.spec")


def cache_root() -> Path:
    """``$STEP_HDL_SWEEP_CACHE``, else ``sweep/`` under the build cache (``$STEP_HDL_BUILD`` or
    ``~/.cache/step-hdl``)."""
    env = os.environ.get("STEP_HDL_SWEEP_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("STEP_HDL_BUILD", Path.home() / ".cache" / "step-hdl")) / "sweep"


@lru_cache(maxsize=None)
def code_version(evals) -> str:
    """A hash of the source of the modules the evaluations ``evals`` run (:data:`_ENTRIES` and their import
    closure); any edit there changes every key that depends on it."""
    from step_hdl import sources
    modules = set(_RECORD)
    for e in evals:
        modules |= sources.closure(list(_ENTRIES[e]))
    h = hashlib.sha256()
    for m in sorted(modules):
        path = sources.source_file(m)
        h.update(m.encode() + b"\0" + (path.read_bytes() if path is not None else b"") + b"\0")
    return h.hexdigest()


@lru_cache(maxsize=None)
def file_hash(path: str, mtime_ns: int, size: int) -> str:
    """The content hash of file ``path`` (``mtime_ns`` and ``size`` key the memo: a changed file is hashed
    again)."""
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
    from step_hdl.sim.model.dram import DRAM_PRESETS
    traces = {}
    for path in trace_files(point):
        st = path.stat()
        traces[path.name] = file_hash(str(path), st.st_mtime_ns, st.st_size)
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
