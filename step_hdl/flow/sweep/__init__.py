"""Design-space sweeps: points over workload parameters, fabric fields and DRAM presets, evaluated with
the metrics, the model and the RTL on a process pool or a Ray cluster, cached by content and resumable.

    from step_hdl.flow.sweep import grid, run_sweep
    pts = grid("moe", {"trace": ["mixtral_b64", "qwen_b64"], "tile": [4, 8, 16]}, {"tiling": "static"})
    res = run_sweep(pts, "process", workers=2)      # res.rows: one dict per point

``step-hdl sweep`` is its command line; ``docs/sweep.md`` its guide. The sweep
runs above the simulators and the mapper (a top-layer module, like the flow).
"""

from step_hdl.flow.sweep.cache import ResultCache, cache_root, point_key
from step_hdl.flow.sweep.executors import EXECUTORS
from step_hdl.flow.sweep.run import SweepResult, identical, run_sweep
from step_hdl.flow.sweep.spec import EVALS, SweepError, SweepPoint, grid
from step_hdl.flow.sweep.table import pareto, plot_pareto, write_table

__all__ = ["EVALS", "EXECUTORS", "ResultCache", "SweepError", "SweepPoint", "SweepResult", "cache_root", "grid",
           "identical", "pareto", "plot_pareto", "point_key", "run_sweep", "write_table"]
