"""How close a float workload's result is to its float64 reference, and how close it has to be.

A float graph's result differs from the exact (float64) one by the roundings of
its operations (:mod:`step_hdl.floats`). :func:`rounding_budget` bounds that
difference from the graph alone: along the longest dependence path to an
output tensor, the sum of each operation's largest rounding error relative to
its result, from the format it rounds to (half an ulp for a correctly rounded
one, what ``docs/floats.md`` measured for exp and SiLU) plus the fp32 roundings
of its sums. It assumes the errors pass along the path without amplification,
as for well-conditioned data (the workloads' random inputs); a result with much
cancellation can exceed it. :func:`accuracy` measures the difference normwise,
so that values near zero do not dominate: the largest error over the largest
reference value, and the mean error over the mean reference magnitude.
"""

from __future__ import annotations

import numpy as np
import sympy

from . import floats
from .graph import Graph
from .types import Tile

__all__ = ["ULPS", "accuracy", "rounding_budget"]

#: the largest error of a function's result from the exact value of its operands, in ulps of the result's
#: format: a correctly rounded operation half an ulp; exp and SiLU half an ulp more than their largest
#: distance from the correctly rounded value (1 and 2 ulps over every bf16 input); exact ones 0
ULPS = {"add": 0.5, "sub": 0.5, "mul": 0.5, "div": 0.5, "convert": 0.5, "matmul": 0.5, "row_sum": 0.5,
        "col_sum": 0.5, "exp": 1.5, "silu": 2.5, "max": 0.0, "relu": 0.0, "row_max": 0.0, "col_max": 0.0,
        "affine": 1.0}
#: the relative precision of fp32 (an ulp of 1): each addition of a sum rounds to half of it
_FP32_ULP = 2.0 ** -floats.FP32.man


def _ulp(tile) -> float:
    return 2.0 ** -floats.fmt_of(tile.dtype).man


def _static(d, bindings) -> int:
    d = sympy.sympify(d).subs(bindings or {})
    return int(d) if d.is_Integer else 1


def _node_error(node, bindings) -> float:
    """The largest relative rounding error ``node`` adds to its result (0 for integers and data movement)."""
    out = next(iter(node.out_types.values()), None)
    if out is None or not isinstance(out.dtype, Tile) or out.dtype.dtype.is_int:
        return 0.0
    ulp = _ulp(out.dtype)
    if node.kind == "Map":
        f = node.p("fn")
        err = ULPS.get(f.name, 0.5) * ulp
        if f.name == "matmul":
            a = node.t("in0").dtype
            k = a.rows if f.param("transpose_a") else a.cols
            err += _static(k, bindings) * 0.5 * _FP32_ULP          # the fp32 sum of its k products
        elif f.name in ("row_sum", "col_sum"):
            a = node.t("in0").dtype
            err += _static(a.cols if f.name == "row_sum" else a.rows, bindings) * 0.5 * _FP32_ULP
        return err
    if node.computes and node.kind != "Map" and node.p("update").name in ("add", "add_groups"):    # a reduction
        updates = 1
        for d in node.inputs["in"].type.shape[len(node.inputs["in"].type.shape) - node.p("rank"):]:
            updates *= _static(d, bindings)
        return updates * 0.5 * ulp                                   # each update rounds
    return 0.0


def rounding_budget(graph: Graph, tensor: str, bindings=None) -> float:
    """The bound on the normwise relative error of float tensor ``tensor`` (written by a store of
    ``graph``): the largest sum of :func:`_node_error` over a dependence path into its stores."""
    acc: dict[str, float] = {}
    for node in graph.topological_order():
        prev = [acc.get(r.node.name, 0.0) for r in node.inputs.values() if r is not None]
        acc[node.name] = max(prev, default=0.0) + _node_error(node, bindings)
    stores = [n for n in graph.nodes.values()
              if n.memory == "store" and n.p("tensor") == tensor]
    return max((acc[n.name] for n in stores), default=0.0)


def accuracy(got, want) -> dict:
    """``{"max_rel_error", "mean_rel_error"}`` of ``got`` against the reference ``want`` (float64 numpy):
    the largest absolute error over the largest reference magnitude, and the mean absolute error over the
    mean reference magnitude (NaN where the reference is all zeros; inf where a value is not finite and
    the reference is)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    with np.errstate(invalid="ignore"):
        err = np.abs(got - want)
    err = np.where(np.isnan(err) & ~np.isnan(want), np.inf, err)
    big, mean = np.abs(want).max(initial=0.0), np.abs(want).mean() if want.size else 0.0
    return {"max_rel_error": float(err.max(initial=0.0) / big) if big else float("nan"),
            "mean_rel_error": float(err.mean() / mean) if mean else float("nan")}
