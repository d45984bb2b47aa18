"""Where a sweep's points are evaluated: in this process, on a local process pool, or on a Ray cluster.

An executor calls ``fn(**kwargs)`` for every task ``(index, kwargs)`` and
yields ``(index, result)`` as each finishes, in any order; scheduling is the
pool's or Ray's own. ``fn`` must be importable by the workers (a module-level
function; a fork-started pool also takes one of the script it runs in).
RTL points that share a design share its Verilator build: the build cache
(``sim.rtl.build_cocotb``) builds a design once per machine and makes a second
process wait for the first's build.
"""

from __future__ import annotations

import os
from typing import Iterable, Iterator

from step_hdl.flow.sweep.spec import SweepError

EXECUTORS = ("process", "ray", "serial")


def default_workers() -> int:
    """One worker per core."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def _call(fn, task):
    index, kwargs = task
    return index, fn(**kwargs)


def run_serial(fn, tasks: Iterable, **_) -> Iterator[tuple[int, object]]:
    for task in tasks:
        yield _call(fn, task)


def run_process(fn, tasks: Iterable, workers: int | None = None, **_) -> Iterator[tuple[int, object]]:
    """A :class:`concurrent.futures.ProcessPoolExecutor` of ``workers`` processes (default: one per core)."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    tasks = list(tasks)
    if not tasks:
        return
    pool = ProcessPoolExecutor(max_workers=min(workers or default_workers(), len(tasks)))
    try:
        futures = [pool.submit(_call, fn, t) for t in tasks]
        for fut in as_completed(futures):
            yield fut.result()
    finally:    # interrupted: the points not started are dropped (their results were never cached)
        pool.shutdown(wait=True, cancel_futures=True)


def run_ray(fn, tasks: Iterable, workers: int | None = None, address: str | None = None,
            **_) -> Iterator[tuple[int, object]]:
    """Ray tasks, one CPU each: on the cluster at ``address`` (``auto``: the one this machine belongs to), or
    on a local cluster of ``workers`` CPUs (default: one per core) started for the sweep."""
    try:
        import ray
    except ImportError:
        raise SweepError("--executor ray needs Ray: pip install -e .[ray] (or pip install ray)") from None
    tasks = list(tasks)
    if not tasks:
        return
    started = not ray.is_initialized()
    if started:
        kw = {"address": address} if address else {"num_cpus": workers or default_workers()}
        ray.init(include_dashboard=False, log_to_driver=False, logging_level="ERROR", **kw)
    try:
        remote = ray.remote(num_cpus=1)(_call)
        pending = {remote.remote(fn, t): t[0] for t in tasks}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                pending.pop(ref)
                yield ray.get(ref)
    finally:
        if started:
            ray.shutdown()


def executor(name: str):
    """The executor function called ``name`` (:data:`EXECUTORS`)."""
    table = {"process": run_process, "ray": run_ray, "serial": run_serial}
    if name not in table:
        raise SweepError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")
    return table[name]
