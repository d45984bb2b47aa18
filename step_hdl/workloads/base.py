"""What every workload builder returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..graph import Graph
from ..interp import RunResult, run
from ..functions import cast
from ..types import DType


@dataclass
class Workload:
    """A STeP graph with its inputs and the numpy reference of its outputs.

    Attributes
    ----------
    graph : Graph
    tensors : dict of str to numpy.ndarray
        Initial off-chip tensors.
    streams : dict
        Data for source nodes (routing tables, KV lengths).
    expected : dict of str to numpy.ndarray
        Reference result per output tensor, computed with numpy.
    dtype : DType
        Element type of the arithmetic; integer types are checked bit-exactly, float ones against the
        rounding budget of their graph (:func:`step_hdl.accuracy.rounding_budget`).
    subs : dict
        Values of the graph's dimension symbols for this input (per-expert token
        counts, KV lengths), to substitute into symbolic metrics.
    params : dict
        The builder's parameters, for reports.
    """

    graph: Graph
    tensors: dict
    streams: dict
    expected: dict
    dtype: DType
    subs: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)

    def run(self, **kwargs) -> RunResult:
        """Run the reference interpreter on this workload's inputs."""
        return run(self.graph, self.tensors, self.streams, **kwargs)

    def mismatches(self, result: RunResult) -> dict[str, str]:
        """Per output tensor, a description of how it differs from numpy (empty if all match): integers bit
        for bit, floats by their normwise error against the graph's rounding budget (:meth:`accuracy`)."""
        bad = {}
        for name, want in self.expected.items():
            got = result.memory[name]
            if got.shape != want.shape:
                bad[name] = f"shape {got.shape} != {want.shape}"
            elif self.dtype.is_int:
                if not np.array_equal(got, want):
                    diff = np.argwhere(got != want)
                    at = tuple(int(i) for i in diff[0])
                    bad[name] = (f"{len(diff)} of {want.size} elements differ, first at {at}: "
                                 f"got {got[at]}, want {want[at]}")
            else:
                acc = self.accuracy(result)[name]
                if not acc["max_rel_error"] <= acc["budget"]:
                    bad[name] = (f"max relative error {acc['max_rel_error']:.3g} > {acc['budget']:.3g}, the "
                                 f"rounding budget of {self.dtype.name}")
        return bad

    def accuracy(self, result: RunResult) -> dict[str, dict]:
        """Per float output tensor: its max and mean relative error against the float64 reference and the
        rounding budget (:mod:`step_hdl.accuracy`); empty for integer workloads."""
        from ..accuracy import accuracy, rounding_budget
        if self.dtype.is_int:
            return {}
        return {name: {**accuracy(result.memory[name], want),
                       "budget": rounding_budget(self.graph, name, self.subs)}
                for name, want in self.expected.items()}

    def check(self, result: RunResult) -> None:
        bad = self.mismatches(result)
        if bad:
            raise AssertionError("outputs differ from numpy: " + "; ".join(f"{k}: {v}" for k, v in bad.items()))


def random_tensor(rng: np.random.Generator, shape, dt: DType, scale: float = 1.0, int_range: int = 64):
    """Random test data: normal floats (times ``scale``, rounded to ``dt``) or uniform integers in ``[-int_range, int_range)``."""
    if dt.is_int:
        lo = max(dt.min, -int_range)
        hi = min(dt.max + 1, int_range)
        return rng.integers(lo, hi, size=shape).astype(dt.numpy)
    return cast(rng.standard_normal(shape) * scale, dt)


Reference = Callable[..., dict]
