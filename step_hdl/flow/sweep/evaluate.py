"""Evaluate one sweep point: its metrics, model and RTL results as one flat record.

:func:`evaluate` runs in a worker process (or a Ray task): it takes plain data
(the point's JSON and its fabric group's) and returns plain data, and never
raises for a point that fails; the record says what went wrong instead.
"""

from __future__ import annotations

import time
import traceback
from functools import lru_cache

from step_hdl.flow.sweep.spec import SweepPoint

#: the metrics a record carries (``step-hdl metrics``)
METRICS = ("offchip_bytes", "onchip_bytes", "flops", "operational_intensity")


def _workload(point: SweepPoint):
    from step_hdl.workloads.registry import build, defaults
    return build(point.workload, defaults(point.workload, **{k.replace("-", "_"): v
                                                             for k, v in point.params.items()}))


@lru_cache(maxsize=8)
def _group_fabric(peers: tuple, tile: int, dtype: str, fabric_json: str):
    """The fabric sized for every point of a group (``peers``: their JSON), built once per process."""
    import json
    from step_hdl.flow.api import FitFabric, shared_fabric
    ws = [_workload(SweepPoint.from_json(json.loads(p))) for p in peers]
    return shared_fabric(ws, FitFabric(tile, dtype, json.loads(fabric_json)))


def fabric_of(point: SweepPoint, peers: tuple = ()):
    """What ``point`` runs on: the fabric sized for the points of its group (``peers``, their JSON; one build
    for all of them), or, alone, a fabric sized to fit it (a :class:`~step_hdl.flow.api.FitFabric`), with the
    point's fabric fields either way; the model times the same one (as ``step-hdl compare``)."""
    import json
    from step_hdl.flow.api import FitFabric
    if not peers:
        return FitFabric(point.tile, point.params["dtype"], point.fabric)
    return _group_fabric(tuple(sorted(peers)), point.tile, point.params["dtype"], json.dumps(point.fabric))


def _metrics(w) -> dict:
    from step_hdl.metrics import metrics, workload_values
    m = metrics(w.graph)
    values, _ = workload_values(m, w)
    d = m.to_dict(values)
    out = {k: d[k] for k in METRICS}
    if isinstance(out["operational_intensity"], float):
        out["operational_intensity"] = round(out["operational_intensity"], 4)
    return out


def _model(point: SweepPoint, w, lowered) -> dict:
    from step_hdl.flow.api import model
    res = model(w, dram=point.dram, lowered=lowered)
    return {"model_cycles": res.cycles, "model_offchip_bytes": res.offchip_bytes,
            "model_bandwidth_utilization": round(res.bandwidth_utilization, 4),
            "model_compute_utilization": round(res.compute_utilization, 4)}


def _sim(point: SweepPoint, w, lowered, backend: str) -> dict:
    from step_hdl.flow.api import sim
    run = sim(w, lowered, backend, point.dram, with_model=False)
    prep, res = run.prepared, run.rtl
    return {"rtl_cycles": res.cycles, "rtl_status": res.status, "rtl_outputs_match": res.outputs_match,
            "rtl_offchip_bytes": res.bytes_read + res.bytes_written, "rtl_reference_bytes": prep.reference_bytes,
            "rtl_design": prep.design.key(), "rtl_fabric": prep.design.fabric.to_json(),
            "rtl_build_s": round(res.build_s, 1), "rtl_run_s": round(res.run_s, 2)}


def evaluate(point_json: dict, peers: tuple = (), backend: str = "verilator") -> dict:
    """The record of one point: ``status`` ``ok`` with every evaluation's results, or ``error`` with
    ``error`` (the exception's type and message; the evaluations done before it keep their results).
    ``seconds``: the point's wall time."""
    t0 = time.perf_counter()
    rec: dict = {"status": "ok"}
    try:
        point = SweepPoint.from_json(point_json)
        w = _workload(point)
        if "metrics" in point.evals:
            rec.update(_metrics(w))
        if "model" in point.evals or "sim" in point.evals:
            from step_hdl.flow.api import lower
            lowered = lower(w, fabric_of(point, peers))      # once: the model and the RTL run the same program
            if "model" in point.evals:
                rec.update(_model(point, w, lowered))
            if "sim" in point.evals:
                rec.update(_sim(point, w, lowered, backend))
    except Exception as exc:      # a failing point is recorded, not the end of the sweep
        from step_hdl.errors import StepError
        rec["status"] = "error"
        rec["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        if not isinstance(exc, StepError):
            rec["traceback"] = traceback.format_exc()[-4000:]
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec
