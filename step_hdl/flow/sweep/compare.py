"""The RTL points of ``step-hdl compare`` and ``bench/crossval.py`` measured through the sweep: in parallel,
and each from the sweep's cache when its design, program and RTL code are unchanged."""

from __future__ import annotations

from step_hdl.flow.sweep.run import run_sweep
from step_hdl.flow.sweep.spec import SweepPoint


def measure_points(points, backend: str = "verilator", executor_name: str = "process", workers: int | None = None,
                   cache=True, progress: bool = False) -> list[dict]:
    """Measure ``points`` (``flow.compare.Point``) in RTL; one result per point in the form
    (the point's fields, ``rtl_cycles``, ``outputs_match``, ``offchip_bytes``, ``reference_bytes``,
    ``fabric``, ``design``, ``build_s``, ``run_s``, ``wall_s``) that ``flow.compare.compare`` takes. The points
    of a group share one fabric (one build); a point that fails raises its error."""
    from step_hdl.flow.compare import CompareError
    sweep = [SweepPoint.make(p.workload, p.params, p.tile, p.dram, evals=("sim",), group=p.group,
                             where=p.label()) for p in points]
    res = run_sweep(sweep, executor_name, workers, cache=cache, backend=backend, progress=progress)
    out = []
    for p, row in zip(points, res.rows):
        if row["status"] != "ok":
            raise CompareError(f"RTL {p.label()}: {row['error']}")
        out.append({**p.to_json(), "rtl_cycles": row["rtl_cycles"], "outputs_match": row["rtl_outputs_match"],
                    "offchip_bytes": row["rtl_offchip_bytes"], "reference_bytes": row["rtl_reference_bytes"],
                    "fabric": row["rtl_fabric"], "design": row["rtl_design"], "build_s": row["rtl_build_s"],
                    "run_s": row["rtl_run_s"], "wall_s": row["seconds"]})
    return out
