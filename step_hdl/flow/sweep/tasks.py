"""Any function over a list of calls on a sweep's executors, each result cached by content: what the paper
studies (``bench/paper``) run their points with, so they run in parallel, and a re-run after an unrelated
change takes seconds.

A call's key hashes the function's name, its keyword arguments, the code
version of the model and the simulators (:func:`~step_hdl.flow.sweep.cache.code_version`)
and the contents of ``files`` (the script that defines the function, its helpers,
the traces it reads).
"""

from __future__ import annotations

import hashlib
import json
import time

from step_hdl.flow.sweep.cache import ResultCache, file_hash, code_version
from step_hdl.flow.sweep.executors import executor


def call_key(fn, kwargs: dict, files=(), evals=("model",)) -> str:
    """The content hash of ``fn(**kwargs)`` (``files``: paths whose contents the result depends on)."""
    from pathlib import Path
    hashes = {}
    for f in files:
        p = Path(f)
        st = p.stat()
        hashes[p.name] = file_hash(str(p.resolve()), st.st_mtime_ns, st.st_size)
    blob = json.dumps({"fn": f"{fn.__module__}.{fn.__qualname__}", "kwargs": kwargs, "files": hashes,
                       "code": code_version(evals)}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def run_tasks(fn, calls: list, executor_name: str = "process", workers: int | None = None,
              cache: ResultCache | None | bool = True, files=(), evals=("model",), label=None,
              progress=None) -> list:
    """``[fn(**c) for c in calls]``, each from ``cache`` when its key (:func:`call_key`) is there, the others
    on ``executor_name`` (``process``, ``serial``; ``ray`` needs ``fn`` importable on the cluster); ``files``:
    the paths every result depends on, or a function of the call giving its own (its trace alone); each
    result is stored as it finishes (it must be JSON). An exception in ``fn`` stops the run (the results
    finished before it are kept). ``progress(message)``: called per call done, with ``label(call)``."""
    store = ResultCache() if cache is True else (cache or None)
    keys = [call_key(fn, c, files(c) if callable(files) else files, evals) for c in calls]
    out: list = [None] * len(calls)
    todo = []
    for i, (c, k) in enumerate(zip(calls, keys)):
        hit = store.get(k) if store else None
        if hit is not None:
            out[i] = hit["result"]
            if progress:
                progress(f"{label(c) if label else i} (cached)")
        else:
            todo.append((i, c))
    t0 = time.perf_counter()
    for i, res in executor(executor_name)(fn, todo, workers=workers):
        if store:
            store.put(keys[i], {"result": res})
        out[i] = res
        if progress:
            progress(f"{label(calls[i]) if label else i} ({time.perf_counter() - t0:.0f} s)")
    return out
