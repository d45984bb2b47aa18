"""Run a sweep: look each point up in the cache, evaluate the others on an executor, one row per point."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from step_hdl.flow.sweep.cache import ResultCache, point_key
from step_hdl.flow.sweep.evaluate import evaluate
from step_hdl.flow.sweep.executors import executor
from step_hdl.flow.sweep.spec import SweepError, SweepPoint

#: record fields that are wall times: they differ between runs of the same point (``identical`` skips them)
TIME_FIELDS = ("seconds", "rtl_build_s", "rtl_run_s")


@dataclass
class SweepResult:
    """The rows of a sweep, one per point in the order given, and how each came about."""

    rows: list
    computed: int
    cached: int
    failed: int
    wall_s: float

    def to_json(self) -> dict:
        return {"points": self.rows, "computed": self.computed, "cached": self.cached, "failed": self.failed,
                "wall_s": round(self.wall_s, 2)}


def row_of(point: SweepPoint, record: dict, cached: bool, key: str) -> dict:
    """One table row: every parameter of the point, then its results."""
    row = {"workload": point.workload, **point.params, "phys-tile": point.tile, "dram": point.dram,
           **{f"fabric.{k}": v for k, v in point.fabric.items()}, "evals": "+".join(point.evals),
           "group": point.group}
    row.update(record)
    row["cached"] = cached
    row["key"] = key[:16]
    return row


def identical(a: list, b: list) -> bool:
    """Whether two sweeps' rows agree in every field but wall times and cache flags."""
    skip = set(TIME_FIELDS) | {"cached"}
    strip = [{k: v for k, v in r.items() if k not in skip} for r in a]
    return strip == [{k: v for k, v in r.items() if k not in skip} for r in b]


def _peers(points: list) -> list:
    """Per point, the definitions of its fabric group (empty without a group)."""
    groups: dict = {}
    for p in points:
        if p.group:
            groups.setdefault(p.group, []).append(p.key_json())
    return [tuple(sorted(groups[p.group])) if p.group else () for p in points]


def run_sweep(points, executor_name: str = "process", workers: int | None = None, address: str | None = None,
              cache: ResultCache | None | bool = True, backend: str = "verilator",
              progress: bool = False) -> SweepResult:
    """Evaluate ``points`` (:class:`SweepPoint`), each once: a point whose key is in ``cache`` (a
    :class:`ResultCache`, True: the default one, False/None: none) comes from it; the others run on
    ``executor_name`` (``process``: a local pool of ``workers``, ``ray``: a Ray cluster, at ``address`` or
    local, ``serial``: this process), and each is stored as it finishes, so an interrupted sweep resumes where it
    stopped. A point that fails is recorded (``status`` ``error``); its failure is cached when the point
    causes it (a ``StepError``: a deadlock, a design that does not fit), not when the evaluation crashed.
    ``progress``: a progress bar on stderr (points done, failed, cached, time left)."""
    points = list(points)
    seen: dict = {}
    for i, p in enumerate(points):
        j = seen.setdefault(p.key_json(), i)
        if j != i:
            raise SweepError(f"points {j} and {i} are the same ({p.label()})")
    store = ResultCache() if cache is True else (cache or None)
    run = executor(executor_name)
    t0 = time.perf_counter()
    rows: list = [None] * len(points)
    keys: list = [""] * len(points)
    peers = _peers(points)
    todo = []
    bar = _bar(len(points), progress)
    n_cached = n_failed = 0
    for i, p in enumerate(points):
        try:
            keys[i] = point_key(p, peers[i])
        except Exception as exc:        # a missing trace: the point cannot run
            rows[i] = row_of(p, {"status": "error", "error": f"{type(exc).__name__}: {exc}", "seconds": 0.0},
                             False, "")
            n_failed += 1
            bar.update(1)
            continue
        hit = store.get(keys[i]) if store else None
        if hit is not None:
            rows[i] = row_of(p, hit, True, keys[i])
            n_cached += 1
            n_failed += hit["status"] != "ok"
            bar.update(1)
        else:
            todo.append((i, {"point_json": p.to_json(), "peers": peers[i], "backend": backend}))
    bar.set_postfix(cached=n_cached, failed=n_failed)
    computed = 0
    try:
        for i, rec in run(evaluate, todo, workers=workers, address=address):
            # a result, or a failure the point itself causes (a StepError: a deadlock, a design that does not
            # fit; the same on every run of this code), is stored; a crash (any other exception) is not
            if store and "traceback" not in rec:
                store.put(keys[i], rec)
            if rec["status"] != "ok":
                n_failed += 1
            computed += 1
            rows[i] = row_of(points[i], rec, False, keys[i])
            bar.update(1)
            bar.set_postfix(cached=n_cached, failed=n_failed)
    finally:
        bar.close()
    return SweepResult(rows, computed, n_cached, n_failed, time.perf_counter() - t0)


def _bar(total: int, show: bool):
    from tqdm import tqdm
    return tqdm(total=total, desc="sweep", unit="pt", file=sys.stderr, disable=not show, dynamic_ncols=True)
