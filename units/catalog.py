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


def entries(family: str | None = None) -> list[Entry]:
    return [e for e in CATALOG.values() if family is None or e.family == family]
