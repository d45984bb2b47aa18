"""The approximate model against measured RTL cycles, on every workload.

A :class:`Point` is one configuration: a workload of the registry
(:mod:`step_hdl.workloads.registry`) with its parameters, the physical tile,
the DRAM preset and a *group*: the points of one group share one fabric
(:func:`~step_hdl.flow.api.shared_fabric`), so a sweep of one structure
is one Verilator build. :data:`SWEEPS` holds the default sweeps
(``step-hdl compare <workload>``, ``bench/crossval.py``).

``step_hdl.flow.sweep.compare.measure_points`` measures points in RTL through the
sweep (outputs checked against the interpreter, off-chip bytes against the
interpreter's) and records with each the fabric it ran on; :func:`compare`
runs the model on every measured point,
on that same fabric and DRAM preset, and gives per-point errors
(``model / rtl - 1``, positive: the model is slower) with the Pearson
correlation, mean absolute percentage error and the worst point, over all
points and per workload. :func:`check_points` refuses empty, duplicated or
contradictory measurements; :func:`load_rtl_json` reads them back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from step_hdl.errors import StepError

__all__ = ["Comparison", "CompareError", "Point", "SWEEPS", "check_points", "compare", "load_rtl_json", "mape",
           "model_cycles", "paper_points", "pearson", "plot", "point_workload", "PAPER_SWIGLU",
           "swiglu_points"]

#: the paper's SwiGLU sizes (B, H, I) at a 16x16 physical tile
PAPER_SWIGLU = (64, 256, 512)


class CompareError(StepError):
    """Measured points that cannot be compared: none, duplicated, contradictory or malformed."""


# ----------------------------------------------------------------------------- statistics

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


# ----------------------------------------------------------------------------- points

@dataclass(frozen=True)
class Point:
    """One configuration to measure: ``workload`` (a registry name) with ``params`` (its parameters by their
    command-line names, ``tile-b``; the others take the registry's defaults, ``dtype`` int16), on ``tile x tile`` physical tiles, DRAM preset
    ``dram``; points of one ``group`` share one fabric."""

    workload: str
    params: dict
    tile: int = 4
    dram: str = "paper"
    group: str = ""

    def key(self) -> str:
        """What identifies the measurement (the group aside: it only decides which build runs it)."""
        return json.dumps([self.workload, dict(sorted(self.params.items())), self.tile, self.dram])

    def label(self) -> str:
        return f"{self.workload} " + " ".join(f"{k}={v}" for k, v in self.params.items()) + \
            f" P={self.tile} {self.dram}"

    def to_json(self) -> dict:
        return {"workload": self.workload, "params": dict(self.params), "tile": self.tile, "dram": self.dram,
                "group": self.group}

    @classmethod
    def from_json(cls, obj: dict, where: str = "point") -> "Point":
        if not isinstance(obj, dict) or not isinstance(obj.get("workload"), str) \
                or not isinstance(obj.get("params", {}), dict):
            raise CompareError(f"{where}: expected an object with 'workload' (a name) and 'params' (an object), "
                               f"got {obj!r}"[:300])
        from step_hdl.workloads.registry import WORKLOADS
        if obj["workload"] not in WORKLOADS:
            raise CompareError(f"{where}: unknown workload {obj['workload']!r}; workloads: {', '.join(WORKLOADS)}")
        tile = obj.get("tile", 4)
        if isinstance(tile, bool) or not isinstance(tile, int) or tile < 1:
            raise CompareError(f"{where}: tile must be an integer >= 1, got {tile!r}")
        return cls(obj["workload"], dict(obj.get("params", {})), tile, str(obj.get("dram", "paper")),
                   str(obj.get("group", "")))


def point_workload(point: Point):
    """The :class:`~step_hdl.workloads.base.Workload` of ``point`` (int16 unless its params say otherwise)."""
    from step_hdl.workloads.registry import build, defaults
    try:
        args = defaults(point.workload, **{"dtype": "int16", **{k.replace("-", "_"): v
                                                               for k, v in point.params.items()}})
    except TypeError as exc:
        raise CompareError(f"{point.label()}: {exc}") from None
    return build(point.workload, args)


def swiglu_points(size=PAPER_SWIGLU, tile: int = 16, dram: str = "paper") -> list[Point]:
    """The paper's SwiGLU sweep (``tile_b`` x ``tile_inter``, scaled by ``tile / 16``) of ``size``, one group."""
    B, H, I = size
    return [Point("swiglu", {"batch": B, "hidden": H, "inter": I, "tile-b": tb, "tile-inter": ti}, tile, dram,
                  f"swiglu {B}x{H}x{I} P={tile}") for tb, ti in paper_points(size, tile)]


def paper_points(size=PAPER_SWIGLU, tile: int = 16) -> list[tuple[int, int]]:
    """The paper's (tile_b, tile_inter) sweep, scaled by ``tile / 16`` for smaller physical tiles."""
    s = 16 // tile if tile < 16 else 1
    return [(tb // s, ti // s) for tb in (16, 32, 64) for ti in (16, 32, 64, 128, 256)]


def _moe_points(dram="paper") -> list[Point]:
    common = {"trace": "mixtral_b64", "hidden": 16, "inter": 32, "tile-inter": 16}
    pts = [Point("moe", {**common, "tiling": "static", "tile": t}, 4, dram, f"moe static {t}")
           for t in (3, 4, 6, 8, 10, 16)]
    return pts + [Point("moe", {**common, "tiling": "dynamic"}, 4, dram, "moe dynamic")]


def _tm_points(dram="paper") -> list[Point]:
    common = {"trace": "mixtral_b64", "hidden": 4, "inter": 8, "tile-inter": 4, "tiling": "dynamic"}
    return [Point("moe", {**common, "experts-per-region": g}, 4, dram, f"moe tm {g}") for g in (1, 2, 4)]


def _gqa_points(dram="paper") -> list[Point]:
    common = {"batch": 16, "kv-trace": "3", "scale": 64, "group": 4, "head-dim": 4, "regions": 4}
    return [Point("gqa", {**common, "strategy": s}, 4, dram, f"gqa {s}")
            for s in ("interleaved", "contiguous", "dynamic")]


#: the default sweep of each ``step-hdl compare`` workload: SwiGLU, the paper's at 16x16 (``swiglu-4``: at a
#: quarter of the size on 4x4 tiles); MoE on the real ``mixtral_b64`` routing (static tiles of 3 to 16 rows and
#: dynamic tiles; ``moe-tm``: 1, 2, 4 experts per region); GQA decode on a real b16 KV trace, each strategy
SWEEPS = {
    "swiglu": lambda dram="paper": swiglu_points(PAPER_SWIGLU, 16, dram),
    "swiglu-4": lambda dram="paper": swiglu_points((16, 64, 128), 4, dram),
    "moe": _moe_points,
    "moe-tm": _tm_points,
    "gqa": _gqa_points,
}


# ----------------------------------------------------------------------------- running

def model_cycles(result: dict) -> int:
    """The model's cycles for a measured point, on the fabric and DRAM preset it ran on."""
    from .api import Fabric, model
    point = Point.from_json(result)
    w = point_workload(point)
    return model(w, Fabric.from_json(result["fabric"]) if result.get("fabric") else point.tile, point.dram).cycles


# ----------------------------------------------------------------------------- comparing

def check_points(results: list[dict], where: str = "RTL results") -> list[dict]:
    """The measured points, or a :class:`CompareError`: none, a malformed one, one without positive cycles
    or whose outputs differed, the same configuration twice (named, with both cycle counts)."""
    if not results:
        raise CompareError(f"{where}: no measured points")
    seen: dict = {}
    out = []
    for k, r in enumerate(results):
        p = Point.from_json(r, f"{where}: point {k}")
        c = r.get("rtl_cycles")
        if isinstance(c, bool) or not isinstance(c, int) or c <= 0:
            raise CompareError(f"{where}: point {k} ({p.label()}): rtl_cycles must be a positive integer, got {c!r}")
        if r.get("outputs_match") is False:
            raise CompareError(f"{where}: point {k} ({p.label()}): its RTL outputs differ from the interpreter; "
                               f"its cycles mean nothing")
        if p.key() in seen:
            j, prev = seen[p.key()]
            what = "contradictory" if prev["rtl_cycles"] != c else "duplicated"
            raise CompareError(f"{where}: points {j} and {k} are the same configuration ({p.label()}), "
                               f"{what}: {prev['rtl_cycles']} and {c} cycles")
        seen[p.key()] = (k, r)
        out.append(r)
    return out


@dataclass
class Comparison:
    """Per-point model against RTL cycles and the summary statistics, over all points and per workload."""

    points: list = field(default_factory=list)   # dicts: point fields, rtl_cycles, model_cycles, error_pct
    pearson: float = float("nan")
    mape: float = float("nan")
    worst: dict | None = None                    # the point with the largest |error|
    per_workload: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        def clean(x):
            return None if isinstance(x, float) and np.isnan(x) else round(x, 6)
        return {"points": self.points, "pearson": clean(self.pearson), "mape_pct": clean(self.mape),
                "worst_pct": self.worst["error_pct"] if self.worst else None, "worst": self.worst,
                "per_workload": {k: {a: clean(b) if isinstance(b, float) else b for a, b in v.items()}
                                 for k, v in self.per_workload.items()}}

    def table(self) -> str:
        lines = [f"{'point':<88} {'rtl_cycles':>11} {'model_cycles':>13} {'error %':>8}"]
        for p in self.points:
            lines.append(f"{Point.from_json(p).label()[:88]:<88} {p['rtl_cycles']:>11,} {p['model_cycles']:>13,} "
                         f"{p['error_pct']:>+8.1f}")
        for name, s in self.per_workload.items():
            lines.append(f"{name}: {s['points']} points, pearson {_fmt(s['pearson'])}, mean error "
                         f"{s['mape_pct']:.2f} %, worst {s['worst_pct']:+.1f} %")
        w = self.worst
        lines.append(f"all: {len(self.points)} points, pearson {_fmt(self.pearson)}, mean error {self.mape:.2f} %"
                     + (f", worst {w['error_pct']:+.1f} % ({Point.from_json(w).label()})" if w else ""))
        return "\n".join(lines)


def _fmt(x) -> str:
    return "n/a (fewer than 2 points, or constant)" if x is None or np.isnan(x) else f"{x:.4f}"


def workload_label(result: dict) -> str:
    """The series a point belongs to: its workload, the MoE's time-multiplexed runs apart."""
    p = result.get("params", {})
    if result["workload"] == "moe" and p.get("experts-per-region", 1) != 1 or result.get("group", "").startswith(
            "moe tm"):
        return "moe-tm"
    return result["workload"]


def compare(results: list[dict], model_fn=model_cycles, progress=None) -> Comparison:
    """Run ``model_fn(result) -> cycles`` on each measured point (:func:`check_points` first)."""
    out = Comparison()
    for r in check_points(results):
        model = int(model_fn(r))
        rtl = int(r["rtl_cycles"])
        out.points.append({**{k: v for k, v in r.items() if k != "fabric"}, "model_cycles": model,
                           "error_pct": round((model / rtl - 1) * 100, 3)})
        if progress:
            progress(f"model {Point.from_json(r).label()}: {model:,} (RTL {rtl:,})")
    out.pearson, out.mape, out.worst = _stats(out.points)
    for name in sorted({workload_label(p) for p in out.points}):
        pts = [p for p in out.points if workload_label(p) == name]
        pr, mp, worst = _stats(pts)
        out.per_workload[name] = {"points": len(pts), "pearson": pr, "mape_pct": mp,
                                  "worst_pct": worst["error_pct"]}
    return out


def _stats(points):
    rtl = [q["rtl_cycles"] for q in points]
    model = [q["model_cycles"] for q in points]
    return pearson(rtl, model), mape(rtl, model), max(points, key=lambda q: abs(q["error_pct"]))


def load_rtl_json(path) -> list[dict]:
    """Measured points from a JSON file: a list of results (``step_hdl.flow.sweep.compare.measure_points``,
    ``step-hdl compare --save-rtl``) or an object with a ``points`` list (``bench/crossval.py --json``).
    Raises :class:`CompareError` naming the file for anything else."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as exc:
        raise CompareError(f"cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise CompareError(f"{path} is not valid JSON: {exc}") from None
    if isinstance(data, dict):
        if "points" not in data:
            raise CompareError(f"{path}: expected a list of points or an object with a 'points' list")
        data = data["points"]
    if not isinstance(data, list):
        raise CompareError(f"{path}: expected a list of points")
    return data


def plot(cmp: Comparison, path, title: str = "model against RTL cycles") -> None:
    """Model cycles against RTL cycles, one colour per workload, with the identity line (matplotlib, Agg)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    for name in sorted({workload_label(p) for p in cmp.points}):
        pts = [p for p in cmp.points if workload_label(p) == name]
        ax.scatter([p["rtl_cycles"] for p in pts], [p["model_cycles"] for p in pts], label=f"{name} ({len(pts)})",
                   s=22)
    lo = min(min(p["rtl_cycles"], p["model_cycles"]) for p in cmp.points)
    hi = max(max(p["rtl_cycles"], p["model_cycles"]) for p in cmp.points)
    ax.plot([lo, hi], [lo, hi], "k:", lw=1, label="model = RTL")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("RTL cycles")
    ax.set_ylabel("model cycles")
    ax.set_title(f"{title}\npearson {_fmt(cmp.pearson)}, mean error {cmp.mape:.1f} %, worst "
                 f"{cmp.worst['error_pct']:+.1f} %", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
