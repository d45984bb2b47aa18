"""Compute operators: Map, Accum, Scan, FlatMap."""

from __future__ import annotations

import numpy as np
import sympy

from ..errors import StepTypeError
from ..functions import apply_typed
from ..process import Emitter, emit_block
from ..token import DONE, data, stop
from ..types import StreamType, Tile, dims_equal, ragged, sum_over
from .base import Op, ZERO, Variadic, register


@register
class Map(Variadic):
    """Apply ``fn`` element-wise to one stream or two streams of equal shape."""

    kind = "Map"
    computes = True
    unit = "map"
    params_spec = {"fn": ("fn",), "n": ("int", 1)}

    def infer(self):
        f, n = self.p("fn"), self.p("n")
        if n not in (1, 2):
            raise self.shape_error(f"Map takes one or two inputs, got {n}")
        if f.spec.kind != "map" or f.spec.arity != n:
            raise self.type_error(f"function {f.name!r} takes {f.spec.arity} operand(s) "
                                  f"({f.spec.kind} function); this Map has {n} input(s)")
        if n == 2:
            self.same_shape("in0", "in1")
        out = self.fn_type(f, *(self.t(p).dtype for p in self.input_ports()))
        return {"out": self.t("in0").with_dtype(out)}

    def flops(self):
        f = self.p("fn")
        return sum_over(self.t("in0").elements, f.spec.flops(f, *(self.t(p).dtype for p in self.input_ports())))

    def onchip_bytes(self):
        f = self.p("fn")
        if f.name == "matmul":
            a, b = self.t("in0").dtype, self.t("in1").dtype
            return b.nbytes + a.cols * a.dtype.bytes  # weight tile + one row of the input tile
        return ZERO

    def run(self, io):
        f, out_t = self.p("fn"), self.out_types["out"].dtype
        ports = self.input_ports()
        while True:
            toks = []
            for port in ports:
                toks.append((yield from io.get(port)))
            lead = toks[0]
            for port, t in zip(ports[1:], toks[1:]):
                if t.stop != lead.stop or t.done != lead.done:
                    raise io.fail(f"input 'in0' has {lead!r} where input '{port}' has {t!r}: "
                                  f"the streams' shapes differ at run time")
            if lead.is_data:
                yield from io.put("out", data(apply_typed(f, out_t, *(t.payload for t in toks))))
            else:
                yield from io.put("out", lead)
                if lead.done:
                    return


class _Reduce(Op):
    params_spec = {"update": ("fn",), "init": ("fn",), "rank": ("int", 1)}

    def state_type(self):
        upd, init = self.p("update"), self.p("init")
        if init.spec.kind != "init":
            raise self.type_error(f"init {init.name!r} is not an init function (zeros, lowest)")
        if upd.spec.kind != "map" or upd.spec.arity != 2:
            raise self.type_error(f"update {upd.name!r} must take (state, element)")
        b, keep = self.p("rank"), self.params.get("keep", 0)
        if b < 1:
            raise self.shape_error(f"rank must be >= 1, got {b}")
        if keep < 0:
            raise self.shape_error(f"keep must be >= 0, got {keep}")
        self.need_rank("in", b + keep, "rank + keep" if keep else "rank")
        st = self.t("in")
        n = len(st.shape)
        count = sympy.Mul(*st.shape[n - b - keep:n - keep])  # per chunk: a ragged length stays ragged
        try:
            return upd.spec.accum_type(upd, init.spec.out_type(init), st.dtype, count)
        except StepTypeError as exc:
            raise self.type_error(str(exc)) from None

    def init_state(self, io):
        """The initial state, or ``None`` when its size is only known from the data.

        An init such as ``zeros(rows=N_e, ...)`` with a dynamic side takes the
        shape of the chunk's first element, as a hardware accumulator whose
        size comes from the incoming tile does.
        """
        init = self.p("init")
        st = self._state
        if isinstance(st, Tile) and not (st.rows.subs(io.ctx.bindings).is_Integer
                                         and st.cols.subs(io.ctx.bindings).is_Integer):
            return None
        return init.spec.apply(init, io.ctx.bindings)

    def update(self, state, x):
        upd, init = self.p("update"), self.p("init")
        if state is None:
            state = init.spec.apply(init, like=x)
        if upd.name != "retile_row" and _partial_of(self, state, x):
            state = state[:x.shape[0]]
        return apply_typed(upd, _state_out_type(self, state), state, x)

    def final(self, state, io):
        if state is None:  # empty chunk with a data-sized state: an empty tile
            cols = self._state.cols.subs(io.ctx.bindings)
            return np.zeros((0, int(cols) if cols.is_Integer else 0), dtype=self._state.dtype.numpy)
        return state

    def onchip_bytes(self):
        return self._state.nbytes

    def flops(self):
        upd = self.p("update")
        return sum_over(self.t("in").elements, upd.spec.flops(upd, self._state, self.t("in").dtype))


def _partial_of(op, state, x) -> bool:
    """Whether ``x`` is a partial physical tile of the state's size (a lowered graph's packed tile with fewer
    valid rows than its type): it then meets the state's top rows, as a unit adds only the valid rows. A
    ``[1, C]`` element of a ``[1, C]`` type broadcasting into the state is not one."""
    et = op.t("in").dtype
    return (isinstance(x, np.ndarray) and isinstance(state, np.ndarray) and isinstance(et, Tile)
            and dims_equal(et.rows, op._state.rows) is True and x.shape[0] < state.shape[0])


def _state_out_type(op, state):
    st = op._state
    return Tile(st.dtype, state.shape[0], state.shape[1]) if isinstance(state, np.ndarray) else st


@register
class Accum(_Reduce):
    """Reduce each rank-``rank`` chunk to one element: ``init`` at the chunk start, ``update`` per element.

    With ``keep = q > 0`` the innermost ``q`` dimensions are positions that are
    kept: the ``rank`` dimensions above them are reduced separately for every
    position (one state per position), and each reduced chunk emits a block of
    the ``q`` inner dimensions. This is how an accumulator whose state is a
    large logical tile works on a stream of its physical tiles
    (``[n, R/P, C/P]`` with ``rank=1, keep=2`` sums over ``n`` per tile
    position); it holds one state per position on chip.
    """

    kind = "Accum"
    computes = True
    takes_chunks = True
    unit = "accum"
    params_spec = {**_Reduce.params_spec, "keep": ("int", 0)}

    def infer(self):
        self._state = self.state_type()
        st = self.t("in")
        b, keep = self.p("rank"), self.p("keep")
        n = len(st.shape)
        return {"out": StreamType(self._state, tuple(st.shape[:n - b - keep]) + tuple(st.shape[n - keep:]))}

    def onchip_bytes(self):
        keep = self.p("keep")
        positions = sympy.Mul(*self.t("in").shape[len(self.t("in").shape) - keep:]) if keep else 1
        return positions * self._state.nbytes

    def run(self, io):
        if self.p("keep"):
            yield from self._run_keep(io)
            return
        b = self.p("rank")
        state = self.init_state(io)
        while True:
            t = yield from io.get("in")
            if t.done:
                yield from io.put("out", DONE)
                return
            if t.stop == 0:
                state = self.update(state, t.payload)
            elif t.stop >= b:
                yield from io.put("out", data(self.final(state, io)))
                if t.stop > b:
                    yield from io.put("out", stop(t.stop - b))
                state = self.init_state(io)

    def _run_keep(self, io):
        b, keep = self.p("rank"), self.p("keep")
        states: dict[int, object] = {}
        template: list = []          # the first inner block of the chunk: positions and inner stops
        first, pos = True, 0
        while True:
            t = yield from io.get("in")
            if t.done:
                yield from io.put("out", DONE)
                return
            if t.stop == 0:
                states[pos] = self.update(states.get(pos, self.init_state(io)), t.payload)
                if first:
                    template.append(pos)
                pos += 1
            elif t.stop < keep:
                if first:
                    template.append(stop(t.stop))
            else:
                if not first and pos != sum(1 for x in template if isinstance(x, int)):
                    raise io.fail(f"inner block of {pos} elements, the first one had "
                                  f"{sum(1 for x in template if isinstance(x, int))}: kept dimensions must "
                                  f"have the same size in every reduced element")
                first, pos = False, 0
                if t.stop >= keep + b:
                    for x in template:
                        yield from io.put("out", data(self.final(states[x], io)) if isinstance(x, int) else x)
                    yield from io.put("out", stop(t.stop - b))  # the block's S_keep merges into it
                    states, template, first = {}, [], True


@register
class Scan(_Reduce):
    """Like Accum, but emit the running state after every element (shape unchanged)."""

    kind = "Scan"
    computes = True
    unit = "accum"

    def infer(self):
        self._state = self.state_type()
        return {"out": self.t("in").with_dtype(self._state)}

    def run(self, io):
        b = self.p("rank")
        state = self.init_state(io)
        while True:
            t = yield from io.get("in")
            if t.stop == 0 and not t.done:
                state = self.update(state, t.payload)
                yield from io.put("out", data(state))
                continue
            yield from io.put("out", t)
            if t.done:
                return
            if t.stop >= b:
                state = self.init_state(io)


@register
class FlatMap(Op):
    """Replace each element by the stream ``fn`` returns (adds ``fn``'s dimensions, innermost)."""

    kind = "FlatMap"
    unit = "flat_map"
    params_spec = {"fn": ("fn",), "rank": ("int", None)}

    def infer(self):
        f = self.p("fn")
        if f.spec.kind != "flatmap":
            raise self.type_error(f"function {f.name!r} is not a flat-map function (retile_streamify, range)")
        elem, dims = self.fn_type(f, self.t("in").dtype)
        dims = (ragged(f"{self.name}_len"),) if dims is None else tuple(dims)
        if self.p("rank") is not None and self.p("rank") != len(dims):
            raise self.shape_error(f"function {f.name!r} adds {len(dims)} dimension(s), rank says {self.p('rank')}")
        self._q = len(dims)
        return {"out": StreamType(elem, tuple(self.t("in").shape) + dims)}

    def run(self, io):
        f = self.p("fn")
        em = Emitter(io, "out", "in")
        while True:
            t = yield from io.get("in")
            if t.done:
                yield from em.done()
                return
            if t.stop:
                yield from em.stop(t.stop + self._q)
            else:
                yield from emit_block(em, f.spec.apply(f, t.payload), self._q)
                yield from em.element_done()
