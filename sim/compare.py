"""Compare the approximate model's cycle counts with measured RTL cycle counts.

``compare(points_rtl, model_fn)`` runs ``model_fn(point)`` (model cycles) on
every RTL point (dicts with at least ``tile_b``, ``tile_inter``, ``cycles``)
and returns per-point errors and the summary statistics: Pearson correlation
(numpy), mean absolute percentage error and the worst point. Errors are
``model / rtl - 1`` (positive: the model is slower than the RTL).

:func:`swiglu_model_fn` is the model of one point of the SwiGLU paper sweep,
:func:`load_rtl_points` reads RTL results (a list of points, or the ``sweep``
list of ``bench/rtl_sim.py --json``), :func:`plot` draws both series.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Comparison", "compare", "pearson", "mape", "load_rtl_points", "swiglu_model_fn", "plot",
           "PAPER_SWIGLU", "paper_points", "run_rtl_sweep"]

#: the paper's SwiGLU sizes (B, H, I) at a 16x16 physical tile
PAPER_SWIGLU = (64, 256, 512)


def pearson(a, b) -> float:
    """Pearson correlation of two equal-length series (nan when either is constant or shorter than 2)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"pearson: series of different lengths ({a.size} and {b.size})")
    if a.size < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def mape(rtl, model) -> float:
    """Mean absolute percentage error of ``model`` against ``rtl`` (in percent)."""
    rtl, model = np.asarray(rtl, dtype=float), np.asarray(model, dtype=float)
    if rtl.size == 0:
        return float("nan")
    if np.any(rtl <= 0):
        raise ValueError("mape: RTL cycle counts must be positive")
    return float(np.mean(np.abs(model / rtl - 1)) * 100)


@dataclass
class Comparison:
    """Per-point model vs RTL cycles and the summary statistics."""

    points: list = field(default_factory=list)   # dicts: tile_b, tile_inter, rtl_cycles, model_cycles, error_pct
    pearson: float = float("nan")
    mape: float = float("nan")
    worst: dict | None = None                    # the point with the largest |error|

    def to_dict(self) -> dict:
        def clean(x):
            return None if isinstance(x, float) and np.isnan(x) else round(x, 6)
        return {"points": self.points, "pearson": clean(self.pearson), "mape": clean(self.mape),
                "worst": self.worst}

    def table(self) -> str:
        lines = [f"{'tile_b':>6} {'tile_i':>6} {'rtl_cycles':>11} {'model_cycles':>13} {'error %':>8}"]
        for p in self.points:
            lines.append(f"{p['tile_b']:>6} {p['tile_inter']:>6} {p['rtl_cycles']:>11,} {p['model_cycles']:>13,} "
                         f"{p['error_pct']:>+8.1f}")
        w = self.worst
        lines.append(f"pearson {self.pearson:.4f}  mape {self.mape:.2f} %"
                     + (f"  worst {w['error_pct']:+.1f} % at tile_b={w['tile_b']} tile_inter={w['tile_inter']}"
                        if w else ""))
        return "\n".join(lines)


def compare(points_rtl: list[dict], model_fn) -> Comparison:
    """Run ``model_fn(point) -> cycles`` on each RTL point and compare with its ``cycles``."""
    out = Comparison()
    for p in points_rtl:
        if "cycles" not in p:
            raise ValueError(f"RTL point {p!r} has no 'cycles'")
        rtl = int(p["cycles"])
        if rtl <= 0:
            raise ValueError(f"RTL point {p!r}: cycles must be positive")
        model = int(model_fn(p))
        out.points.append({"tile_b": p.get("tile_b"), "tile_inter": p.get("tile_inter"), "rtl_cycles": rtl,
                           "model_cycles": model, "error_pct": round((model / rtl - 1) * 100, 3)})
    if out.points:
        rtl = [q["rtl_cycles"] for q in out.points]
        model = [q["model_cycles"] for q in out.points]
        out.pearson, out.mape = pearson(rtl, model), mape(rtl, model)
        out.worst = max(out.points, key=lambda q: abs(q["error_pct"]))
    return out


def load_rtl_points(path) -> list[dict]:
    """RTL points from a JSON file: a list of points, or an object with a ``sweep`` list.

    Points without cycles (not run, or not finished) are skipped.
    """
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, dict):
        if "sweep" not in data:
            raise ValueError(f"{path}: expected a list of points or an object with a 'sweep' list")
        data = data["sweep"]
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of points")
    pts = []
    for p in data:
        if not isinstance(p, dict) or not {"tile_b", "tile_inter"} <= set(p):
            raise ValueError(f"{path}: every point needs tile_b, tile_inter and cycles, got {p!r}")
        if p.get("cycles") and p.get("status", "done") == "done":
            pts.append(p)
    return pts


def swiglu_model_fn(size=PAPER_SWIGLU, tile: int = 16, dram: str = "paper", dtype: str = "int16"):
    """``point -> model cycles`` for SwiGLU of ``size`` (B, H, I) on ``tile x tile`` physical tiles."""
    from step_hdl.mapper.fabric import Fabric
    from step_hdl.sim.model import ModelParams, simulate
    from step_hdl.workloads import swiglu
    # the timing parameters of the fabric the RTL sweep is built on (shared_fabric keeps Fabric's defaults)
    params = ModelParams.from_fabric(Fabric(tile=tile, dtype=dtype), dram)

    def fn(p):
        w = swiglu(*size, int(p["tile_b"]), int(p["tile_inter"]), dtype)
        return simulate(w.graph, params, w.tensors).cycles
    return fn


def paper_points(size=PAPER_SWIGLU, tile: int = 16) -> list[tuple[int, int]]:
    """The paper's (tile_b, tile_inter) sweep, scaled by ``tile / 16`` for smaller physical tiles."""
    s = 16 // tile if tile < 16 else 1
    return [(tb // s, ti // s) for tb in (16, 32, 64) for ti in (16, 32, 64, 128, 256)]


def run_rtl_sweep(size=PAPER_SWIGLU, tile: int = 16, backend: str = "verilator", dram: str = "paper",
                  progress=None) -> list[dict]:
    """Run every sweep point in RTL on one shared build; points as :func:`load_rtl_points` returns them."""
    from step_hdl.mapper.prepare import prepare, shared_fabric
    from step_hdl.sim.fabric import run
    from step_hdl.workloads import swiglu
    pts = paper_points(size, tile)
    ws = [swiglu(*size, tb, ti, "int16") for tb, ti in pts]
    fab = shared_fabric(ws, tile)
    out = []
    for (tb, ti), w in zip(pts, ws):
        res = run(prepare(w, fab), backend, dram)
        if not res.outputs_match:
            raise ValueError(f"RTL outputs differ from the interpreter at tile_b={tb} tile_inter={ti}: "
                             f"{res.mismatches}")
        out.append({"tile_b": tb, "tile_inter": ti, "cycles": res.cycles})
        if progress:
            progress(f"  RTL tile_b={tb} tile_inter={ti}: {res.cycles:,} cycles")
    return out


def plot(cmp: Comparison, path, title: str = "model vs RTL cycles") -> None:
    """Both series per point (matplotlib, Agg backend)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [f"{p['tile_b']}/{p['tile_inter']}" for p in cmp.points]
    x = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(labels) + 2), 4))
    ax.plot(x, [p["rtl_cycles"] for p in cmp.points], "o-", label="RTL")
    ax.plot(x, [p["model_cycles"] for p in cmp.points], "s--", label="model")
    ax.set_xticks(x, labels, rotation=60)
    ax.set_xlabel("tile_b / tile_inter")
    ax.set_ylabel("cycles")
    ax.set_title(f"{title} (pearson {cmp.pearson:.3f}, mape {cmp.mape:.1f} %)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
