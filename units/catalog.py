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
    """One unit of the catalog.

    ``stimulus(unit, n)`` returns ``(kind, inputs, op_params)`` or, for units
    that touch off-chip memory, ``(kind, inputs, op_params, extra)`` with
    ``extra = {"tensors": ..., "declare": ...}``. ``expected(inputs, op_params,
    extra)`` overrides the interpreter run (a unit covering two operators);
    ``harness(unit, op_params, inputs, extra)`` returns the component to
    simulate and its configuration words (a unit plus its test memory);
    ``hardware(unit)`` the synthesizable part.
    """

    name: str
    make: Callable
    stimulus: Callable
    main_output: str = "o"
    claimed_ii: float = 1.0
    family: str = ""
    expected: Callable | None = None
    harness: Callable | None = None
    hardware: Callable = staticmethod(lambda unit: unit)

    def run_reference(self, kind, inputs, op_params, extra):
        from step_hdl.interp import run_operator
        if self.expected is not None:
            return self.expected(inputs, op_params, extra)
        return run_operator(kind, inputs, tensors=extra.get("tensors"), declare=extra.get("declare"), **op_params)

    def component(self, unit, op_params, inputs, extra) -> tuple:
        """(component to simulate, configuration words)."""
        if self.harness is not None:
            return self.harness(unit, op_params, inputs, extra)
        return unit, unit.configure(op_params, {p: st for p, (st, _) in inputs.items()})


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


def _memory_entries():
    from .offchip import (LinearLoadParams, LinearOffChipLoad, LinearOffChipStore, OffChipParams,
                          RandomOffChipLoad, RandomOffChipStore)
    from .onchip import OnChipBuffer, OnChipBufferParams
    from .memport import MemoryHarness, SimMemory, memory_image, sim_ctl_word

    def tensor(unit, n):
        p = unit.params
        from step_hdl.types import dtype as mk
        rng = np.random.default_rng(3)
        arr = rng.integers(-100, 100, (n * p.rows, p.cols)).astype(mk(p.dtype).numpy)
        return {"t": arr, "o": np.zeros_like(arr)}, {"t": (n * p.rows, p.cols, p.dtype),
                                                     "o": (n * p.rows, p.cols, p.dtype)}

    def harness(unit, op_params, inputs, extra):
        from .layout import tile_format
        p = unit.params
        fmt = tile_format(p.dtype, p.rows, p.cols)
        image, where = memory_image(extra["tensors"], fmt)
        mem = SimMemory(p.port, len(image), image, latency=1, max_inflight=p.max_inflight)
        config = unit.configure(op_params, {q: st for q, (st, _) in inputs.items()},
                                tensor_addr=where[op_params["tensor"]])
        return MemoryHarness(unit, mem), [sim_ctl_word(1, 0, 0)] + config

    def linear_load(unit, n):
        tensors, declare = tensor(unit, n)
        p = unit.params
        return "LinearOffChipLoad", {}, {"tensor": "t", "tile": [p.rows, p.cols], "out_shape": [n],
                                         "stride": [1]}, {"tensors": tensors, "declare": declare}

    def random_load(unit, n):
        tensors, declare = tensor(unit, n)
        p = unit.params
        addrs = [data(np.array([[(7 * k) % n]], np.int32)) for k in range(n)] + [DONE]
        from step_hdl.types import Index
        return "RandomOffChipLoad", {"addr": (StreamType(Index(), (n,)), addrs)}, \
            {"tensor": "t", "tile": [p.rows, p.cols]}, {"tensors": tensors, "declare": declare}

    def buffer(unit, n):
        p = unit.params
        st, toks = tiles_stream(p.rows, p.cols, p.dtype, n, inner=8)
        return "Bufferize", {"in": (st, toks)}, {"rank": 1, "repeat": 2}

    def buffer_expected(inputs, op_params, extra):
        from step_hdl.graph import Graph
        from step_hdl.interp import run
        g = Graph("buffer")
        st, toks = inputs["in"]
        src = g.source(st, data="x")
        g.output(g.streamify(g.bufferize(src, op_params["rank"]), repeat=op_params["repeat"]), name="o")
        return {"out": run(g, streams={"x": toks}).outputs["o"]}

    def bare(unit):
        return unit

    # the linear units as fabrics build them: bursts of a 64-byte block (16 credits: a block of 2x2 int8 tiles)
    bursts = dict(burst_bytes=64, max_inflight=16)
    yield Entry("LinearOffChipLoad", lambda r, c, d: LinearOffChipLoad(LinearLoadParams(r, c, d, 3, **bursts)),
                linear_load, family="memory", harness=harness)
    yield Entry("RandomOffChipLoad", lambda r, c, d: RandomOffChipLoad(OffChipParams(r, c, d, 3)), random_load,
                family="memory", harness=harness)
    yield Entry("OnChipBuffer", lambda r, c, d: OnChipBuffer(OnChipBufferParams(r, c, d, 3,
                                                                                  sram_bytes=64 * r * c * 4)),
                buffer, family="memory", expected=buffer_expected,
                # 18 output tokens per 8-tile buffer read twice, plus one cycle for the last reading's
                # end event in the StopMerger (the end between the readings is eager): 19 cycles / 18 tokens
                claimed_ii=19 / 18)
    # stores have no token output to time; they are sized in the unit table only
    yield Entry("LinearOffChipStore", lambda r, c, d: LinearOffChipStore(OffChipParams(r, c, d, 3, **bursts)), None,
                family="memory", main_output="")
    yield Entry("RandomOffChipStore", lambda r, c, d: RandomOffChipStore(OffChipParams(r, c, d, 3)), None,
                family="memory", main_output="o")


for _e in _memory_entries():
    register(_e)


def entries(family: str | None = None) -> list[Entry]:
    return [e for e in CATALOG.values() if family is None or e.family == family]


def _compute_entries():
    from step_hdl.functions import fn

    from .compute import Accum, AccumParams, FlatMap, FlatMapParams, Map, MapParams, Scan
    from .matmul import MatMul, MatMulParams

    def binary(name):
        def stim(unit, n):
            p = unit.params
            return "Map", {"in0": _rank0(p.rows, p.cols, p.dtype, n, 1),
                           "in1": _rank0(p.rows, p.cols, p.dtype, n, 2)}, {"fn": fn(name), "n": 2}
        return stim

    def reduce_(kind):
        def stim(unit, n):
            p = unit.params
            st, toks = tiles_stream(p.rows, p.cols, p.dtype, n, inner=8)
            return kind, {"in": (st, toks)}, {"update": fn("add"), "rank": 1,
                                              "init": fn("zeros", rows=p.rows, cols=p.cols, dtype="int32")}
        return stim

    def flatmap(unit, n):
        p = unit.params
        return "FlatMap", {"in": _rank0(p.rows, p.cols, p.dtype, max(1, n // (p.rows + 1)))}, \
            {"fn": fn("retile_streamify")}

    yield Entry("Map[matmul]", lambda r, c, d: Map(MapParams(r, c, d, 3, fns=("matmul",))), binary("matmul"),
                family="compute")
    yield Entry("Map[add]", lambda r, c, d: Map(MapParams(r, c, d, 3, fns=("add",))), binary("add"),
                family="compute")

    def matmul_runs(unit, n):
        p = unit.params
        a = tiles_stream(p.rows, p.cols, p.dtype, n, inner=8, seed=1)
        b = tiles_stream(p.rows, p.cols, p.dtype, n, inner=8, seed=2)
        return "MatMul", {"in0": a, "in1": b}, {"fn": fn("matmul"), "n": 2, "k": 4}

    def matmul_expected(inputs, op_params, extra):
        from step_hdl.graph import Graph
        from step_hdl.interp import run
        g = Graph("matmul_chain")
        a, b = (g.source(inputs[q][0], data=q) for q in ("in0", "in1"))
        prod = g.map([a, b], op_params["fn"])
        t = prod.type.dtype
        g.output(g.accum(g.reshape(prod, 0, op_params["k"]), "add",
                         fn("zeros", rows=int(t.rows), cols=int(t.cols), dtype=t.dtype.name)), name="o")
        return {"out": run(g, streams={q: inputs[q][1] for q in ("in0", "in1")}).outputs["o"]}

    # runs of 8 pairs, 4 per output tile: 2 tiles and the run's stop out per 9 cycles in
    yield Entry("MatMul", lambda r, c, d: MatMul(MatMulParams(r, c, d, 3, matmul_transpose_a=False)), matmul_runs,
                family="compute", expected=matmul_expected, claimed_ii=3.0)
    # the accumulator emits its state at each closing stop: 8 elements in, 1 tile out
    yield Entry("Accum[add]", lambda r, c, d: Accum(AccumParams(r, c, d, 3)), reduce_("Accum"),
                family="compute", claimed_ii=9.0)
    yield Entry("Scan[add]", lambda r, c, d: Scan(AccumParams(r, c, d, 3)), reduce_("Scan"), family="compute")
    yield Entry("FlatMap[retile_streamify]", lambda r, c, d: FlatMap(FlatMapParams(r, c, d, 3)), flatmap,
                family="compute")


for _e in _compute_entries():
    register(_e)
