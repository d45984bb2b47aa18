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
        Element type of the arithmetic; integer types are checked bit-exactly.
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
    rtol: float = 1e-5
    atol: float = 1e-6

    def run(self, **kwargs) -> RunResult:
        """Run the reference interpreter on this workload's inputs."""
        return run(self.graph, self.tensors, self.streams, **kwargs)

    def mismatches(self, result: RunResult) -> dict[str, str]:
        """Per output tensor, a description of how it differs from numpy (empty if all match)."""
        bad = {}
        for name, want in self.expected.items():
            got = result.memory[name]
            if self.dtype.is_int:
                if got.shape != want.shape or not np.array_equal(got, want):
                    diff = np.argwhere(got != want) if got.shape == want.shape else []
                    bad[name] = (f"{len(diff)} of {want.size} elements differ, first at {tuple(diff[0])}: "
                                 f"got {got[tuple(diff[0])]}, want {want[tuple(diff[0])]}"
                                 if len(diff) else f"shape {got.shape} != {want.shape}")
            elif not np.allclose(got, want, rtol=self.rtol, atol=self.atol * max(1.0, float(np.abs(want).max()))):
                err = np.abs(got.astype(np.float64) - want) / np.maximum(np.abs(want), 1e-30)
                bad[name] = f"max relative error {err.max():.3g} > {self.rtol}"
        return bad

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
