"""Catalog of the hardware units: how to build each at a given physical tile, and a
steady-state stimulus for benchmarks and size reports.

Every entry gives

* ``make(rows, cols, dtype)``: the unit with representative structural parameters;
* ``stimulus(unit, n)``: ``(kind, inputs, op_params)`` — a language operator and
  ``n``-token input streams (language port -> (StreamType, tokens)) that keep
  the unit busy, for :func:`step_hdl.interp.run_operator` and the RTL;
* ``main_output``: the hardware port whose tokens count for throughput;
* ``claimed_ii``: initiation interval the unit's docstring claims, in cycles
  per output token on ``main_output``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from step_hdl.token import DONE, data, stop
from step_hdl.types import StreamType, Tile

from .params import StreamParams


@dataclass(frozen=True)
class Entry:
    name: str
    make: Callable
    stimulus: Callable
    main_output: str = "o"
    claimed_ii: float = 1.0
    family: str = ""


CATALOG: dict[str, Entry] = {}


def register(entry: Entry) -> Entry:
    CATALOG[entry.name] = entry
    return entry


def tiles_stream(rows, cols, dtype, n, inner=8, seed=0, rank=1):
    """``n`` random tiles as a stream ``[n/inner, inner]`` (rank 1) or ``[1, n/inner, inner]`` (rank 2)."""
    from step_hdl.types import dtype as mk
    dt = mk(dtype)
    rng = np.random.default_rng(seed)
    toks = []
    for k in range(n):
        if dt.is_int:
            t = rng.integers(max(dt.min, -100), min(dt.max, 100) + 1, (rows, cols)).astype(dt.numpy)
        else:
            t = rng.standard_normal((rows, cols)).astype(np.float32)
        toks.append(data(t))
        if k % inner == inner - 1 or k == n - 1:
            toks.append(stop(rank if k == n - 1 else 1))
    toks.append(DONE)
    outer = -(-n // inner)
    shape = (outer, inner) if rank == 1 else (1, outer, inner)
    return StreamType(Tile(dt, rows, cols), shape), toks


def _flatten():
    from .shape import Flatten

    def stim(unit, n):
        # merging the two outer dims renumbers every stop: one output token per input token
        p = unit.params
        st, toks = tiles_stream(p.rows, p.cols, p.dtype, n, rank=2)
        return "Flatten", {"in": (st, toks)}, {"lo": 1, "hi": 2}
    return Entry("Flatten", lambda r, c, d: Flatten(StreamParams(r, c, d, 3)), stim, family="shape")


register(_flatten())


def _rank0(rows, cols, dtype, n, seed=0):
    """``n`` random tiles as a rank-0 stream ``[n]``."""
    st, toks = tiles_stream(rows, cols, dtype, n, inner=n, seed=seed)
    return StreamType(st.dtype, (n,)), [t for t in toks if t.stop == 0]


def _selectors(n_choices, masks):
    from step_hdl.types import Selector
    return StreamType(Selector(n_choices), (len(masks),)), [data(m) for m in masks] + [DONE]


def _shape_entries():
    from .routing import EagerMerge, Partition, Reassemble, RoutingParams
    from .shape import Expand, ExpandParams, Promote, RepeatParams, RepeatStatic, Reshape, ReshapeParams, Zip, ZipParams

    def promote(unit, n):
        p = unit.params
        return "Promote", {"in": _rank0(p.rows, p.cols, p.dtype, n)}, {}

    def repeat(unit, n):
        p = unit.params
        return "RepeatStatic", {"in": _rank0(p.rows, p.cols, p.dtype, n // 4)}, {"count": 4}

    def reshape(unit, n):
        p = unit.params
        return "Reshape", {"in": _rank0(p.rows, p.cols, p.dtype, n - n % 4)}, {"rank": 0, "chunk": 4}

    def expand(unit, n):
        p = unit.params
        st, toks = _rank0(p.rows, p.cols, p.dtype, n // 4)
        elems = [t for t in toks if t.is_data]
        ins = [x for t in elems for x in (t, stop(1))] + [DONE]
        ref = [x for _ in elems for x in ([data(np.zeros((p.rows, p.cols), st.dtype.dtype.numpy))] * 4 + [stop(1)])]
        return "Expand", {"in": (StreamType(st.dtype, (len(elems), 1)), ins),
                          "ref": (StreamType(st.dtype, (len(elems), 4)), ref + [DONE])}, {"rank": 1}

    def zip_(unit, n):
        p = unit.params
        a = _rank0(p.rows0, p.cols0, p.dtype0, n, seed=1)
        b = _rank0(p.rows1, p.cols1, p.dtype1, n, seed=2)
        return "Zip", {"in0": a, "in1": b}, {}

    def partition(unit, n):
        p = unit.params
        return "Partition", {"in": _rank0(p.rows, p.cols, p.dtype, n), "sel": _selectors(2, [0b11] * n)}, \
            {"n": 2, "rank": 0}

    def reassemble(unit, n):
        p = unit.params
        half = n // 2
        return "Reassemble", {"in0": _rank0(p.rows, p.cols, p.dtype, half, 1),
                              "in1": _rank0(p.rows, p.cols, p.dtype, half, 2),
                              "sel": _selectors(2, [0b11] * half)}, {"n": 2, "rank": 0}

    def merge(unit, n):
        p = unit.params
        return "EagerMerge", {"in0": _rank0(p.rows, p.cols, p.dtype, n // 2, 1),
                              "in1": _rank0(p.rows, p.cols, p.dtype, n // 2, 2)}, {"n": 2, "rank": 0}

    yield Entry("Promote", lambda r, c, d: Promote(StreamParams(r, c, d, 3)), promote, family="shape")
    yield Entry("RepeatStatic", lambda r, c, d: RepeatStatic(RepeatParams(r, c, d, 3)), repeat, family="shape")
    yield Entry("Reshape", lambda r, c, d: Reshape(ReshapeParams(r, c, d, 3)), reshape, family="shape")
    yield Entry("Expand", lambda r, c, d: Expand(ExpandParams(r, c, d, 3)), expand, family="shape")
    yield Entry("Zip", lambda r, c, d: Zip(ZipParams(r, c, d, r, c, d, 3)), zip_, family="shape")
    yield Entry("Partition", lambda r, c, d: Partition(RoutingParams(r, c, d, 3, 2)), partition, "o0",
                family="routing")
    yield Entry("Reassemble", lambda r, c, d: Reassemble(RoutingParams(r, c, d, 3, 2)), reassemble,
                family="routing")
    yield Entry("EagerMerge", lambda r, c, d: EagerMerge(RoutingParams(r, c, d, 3, 2)), merge, family="routing")


for _e in _shape_entries():
    register(_e)


def entries(family: str | None = None) -> list[Entry]:
    return [e for e in CATALOG.values() if family is None or e.family == family]
