"""Shape operators: Flatten, Reshape, Promote, Expand, RepeatStatic, Zip."""

from __future__ import annotations

import numpy as np
import sympy

from ..process import Emitter
from ..token import DONE, data, stop
from ..types import Index, StreamType, Tile, TupleType, dims_equal, elements_of, is_static
from .base import Op, register


@register
class Flatten(Op):
    """Merge dimensions ``lo..hi`` (ranks, innermost 0) into one.

    Stops inside the merged range disappear (become ``S_lo`` when ``lo >= 1``,
    since the dimensions below ``lo`` still end there); higher ones are
    renumbered down by ``hi - lo``.
    """

    kind = "Flatten"
    unit = "shape"
    params_spec = {"lo": ("int",), "hi": ("int",)}

    def infer(self):
        lo, hi = self.p("lo"), self.p("hi")
        r = self.t("in").rank
        if not 0 <= lo < hi <= r:
            raise self.shape_error(f"needs 0 <= lo < hi <= input rank {r}, got lo={lo}, hi={hi}")
        shape = list(self.t("in").shape)
        i_hi, i_lo = len(shape) - 1 - hi, len(shape) - 1 - lo
        merged = elements_of(shape[i_hi:i_lo + 1])
        return {"out": self.t("in").with_shape(shape[:i_hi] + [merged] + shape[i_lo + 1:])}

    def run(self, io):
        lo, hi = self.p("lo"), self.p("hi")
        while True:
            t = yield from io.get("in")
            if t.stop > hi:
                t = stop(t.stop - (hi - lo))
            elif t.stop > lo:
                if lo == 0:
                    continue
                t = stop(lo)  # the merged run goes on, but the inner dims below lo still end here
            yield from io.put("out", t)
            if t.done:
                return


@register
class Reshape(Op):
    """Split dimension ``rank`` into ``[ceil(D/chunk), chunk]``.

    At rank 0 a partial last chunk is padded with tiles of ``pad`` and a second
    output ``pad`` (``[1, 1]`` int32, 1 = padded) marks the padded elements.
    With ``partial`` the last chunk of each run may be shorter instead (the
    chunk dimension is then *at most* ``chunk``: how the lowering cuts a
    tile's rows into ``P``-row blocks).
    """

    kind = "Reshape"
    unit = "shape"
    params_spec = {"rank": ("int",), "chunk": ("int",), "pad": ("json", None), "partial": ("bool", False)}

    def infer(self):
        b, s = self.p("rank"), self.p("chunk")
        if s < 1:
            raise self.shape_error(f"chunk must be >= 1, got {s}")
        self.need_rank("in", b, "rank")
        st = self.t("in")
        shape = list(st.shape)
        i = len(shape) - 1 - b
        d = shape[i]
        divisible = is_static(d) and int(d) % s == 0
        if self.p("pad") is not None and self.p("partial"):
            raise self.shape_error("give either pad (fill the last chunk) or partial (keep it short), not both")
        if self.p("pad") is not None:
            if b != 0:
                raise self.shape_error(f"padding only applies at rank 0, got rank {b}")
            if not isinstance(st.dtype, Tile) or not (is_static(st.dtype.rows) and is_static(st.dtype.cols)):
                raise self.type_error(f"padding needs static-size tiles, got {st.dtype}", "in")
        elif is_static(d) and not divisible and not self.p("partial"):
            raise self.shape_error(f"chunk {s} does not divide dimension D{b} = {d}"
                                   + (" (give pad= to pad it)" if b == 0 else ""))
        shape[i:i + 1] = [sympy.ceiling(d / s), sympy.Integer(s)]
        outs = {"out": st.with_shape(shape)}
        if self.p("pad") is not None:
            outs["pad"] = StreamType(Index(), shape)
        return outs

    def run(self, io):
        b, s = self.p("rank"), self.p("chunk")
        em = Emitter(io, "out", "in")
        pm = Emitter(io, "pad", "in") if "pad" in self.out_types else None
        both = [e for e in (em, pm) if e]
        flag = (np.array([[0]], np.int32), np.array([[1]], np.int32))
        c = 0
        padv = None
        if pm:
            from ..functions import cast
            tt = self.t("in").dtype
            padv = cast(np.full((int(tt.rows), int(tt.cols)), self.p("pad")), tt.dtype)  # bf16: rounded

        def close_run():
            nonlocal c
            if c:
                if self.p("partial"):
                    yield from em.end_block(1)
                    c = 0
                    return
                if pm is None:
                    raise io.fail(f"chunk {s} does not divide a run of {c % s or s} + ... elements "
                                  f"(a dynamic dimension not a multiple of {s})")
                while c < s:
                    yield from em.data(padv)
                    yield from pm.data(flag[1])
                    c += 1
                for e in both:
                    yield from e.end_block(1)
                c = 0

        while True:
            t = yield from io.get("in")
            if b == 0:
                if t.done:
                    if self.t("in").rank == 0:
                        yield from close_run()
                    for e in both:
                        yield from e.done()
                    return
                if t.stop:
                    yield from close_run()
                    for e in both:
                        yield from e.stop(t.stop + 1)
                    continue
                yield from em.data(t.payload)
                if pm:
                    yield from pm.data(flag[0])
                c += 1
                if c == s:
                    for e in both:
                        yield from e.end_block(1)
                        yield from e.element_done()
                    c = 0
            else:
                if t.done or t.stop < b:
                    yield from em.token(t)
                    if t.done:
                        return
                    continue
                c += 1
                if t.stop == b:
                    if c != s and self.p("partial") and (yield from io.peek("in")).done:
                        c = s       # the stream's end closes the run (its top stop is implied): a short chunk
                    if c == s:
                        yield from em.stop(b + 1)
                        c = 0
                    else:
                        yield from em.stop(b)
                else:
                    if c != s and not self.p("partial"):
                        raise io.fail(f"chunk {s} does not divide a run of {c} rank-{b} elements "
                                      f"(dimension D{b} is not a multiple of {s})")
                    yield from em.stop(t.stop + 1)
                    c = 0


@register
class Promote(Op):
    """Add a new outermost dimension of size 1 (0 for an empty stream)."""

    kind = "Promote"
    unit = "shape"
    params_spec = {}

    def infer(self):
        st = self.t("in")
        # 1, or 0 when the stream is empty (no outer element at all): Min(1, D_r) keeps metrics exact
        return {"out": st.with_shape((sympy.Min(1, st.shape[0]),) + tuple(st.shape))}

    def run(self, io):
        r = self.t("in").rank
        held = None
        while True:
            t = yield from io.get("in")
            if t.done:
                if held is not None:
                    if held.stop == r and r > 0:
                        held = stop(r + 1)
                    yield from io.put("out", held)
                    if r == 0:
                        yield from io.put("out", stop(1))
                yield from io.put("out", DONE)
                return
            if held is not None:
                yield from io.put("out", held)
            held = t


@register
class Expand(Op):
    """Repeat each element of ``in`` (whose inner ``rank`` dims have size 1) to the shape of ``ref``."""

    kind = "Expand"
    inputs_spec = ("in", "ref")
    params_spec = {"rank": ("int", 1)}

    def infer(self):
        b = self.p("rank")
        if b < 1:
            raise self.shape_error(f"rank must be >= 1, got {b}")
        self.need_rank("in", b, "rank")
        st, ref = self.t("in"), self.t("ref")
        if st.rank != ref.rank:
            raise self.shape_error(f"input rank {st.rank} differs from ref rank {ref.rank}", "ref")
        for d in st.shape[-b:]:
            if dims_equal(d, 1) is not True:
                raise self.shape_error(f"the inner {b} dimension(s) of the input must be 1, shape is "
                                       f"{st.shape_str()}", "in")
        for a, c in zip(st.shape[:-b], ref.shape[:-b]):
            if dims_equal(a, c) is False:
                raise self.shape_error(f"outer dimensions of {st.shape_str()} and ref {ref.shape_str()} differ")
        return {"out": ref.with_dtype(st.dtype)}

    def onchip_bytes(self):
        return self.t("in").dtype.nbytes

    def run(self, io):
        b = self.p("rank")
        while True:
            chunk = yield from io.read_chunk("in", b)
            if chunk is None:
                yield from io.expect_done("ref")
                yield from io.put("out", DONE)
                return
            x = next((t.payload for t in chunk if t.is_data), None)
            rchunk = yield from io.read_chunk("ref", b)
            if rchunk is None:
                raise io.fail("ref stream ended before the input", "ref")
            if x is None and any(t.is_data for t in rchunk):
                raise io.fail("an input chunk holds no element but its ref chunk has data to expand it to", "in")
            if rchunk[-1].stop != chunk[-1].stop:
                raise io.fail(f"ref chunk ends with {rchunk[-1]!r} where the input has {chunk[-1]!r}", "ref")
            for t in rchunk:
                yield from io.put("out", data(x) if t.is_data else t)


@register
class RepeatStatic(Op):
    """Repeat each element ``count`` times: adds an innermost dimension of size ``count``."""

    kind = "RepeatStatic"
    buffers = True
    unit = "shape"
    params_spec = {"count": ("int",)}

    def infer(self):
        if self.p("count") < 1:
            raise self.shape_error(f"count must be >= 1, got {self.p('count')}")
        st = self.t("in")
        return {"out": st.with_shape(tuple(st.shape) + (sympy.Integer(self.p("count")),))}

    def onchip_bytes(self):
        return self.t("in").dtype.nbytes

    def run(self, io):
        em = Emitter(io, "out", "in")
        while True:
            t = yield from io.get("in")
            if t.done:
                yield from em.done()
                return
            if t.stop:
                yield from em.stop(t.stop + 1)
                continue
            for _ in range(self.p("count")):
                yield from em.data(t.payload)
            yield from em.end_block(1)
            yield from em.element_done()


@register
class Zip(Op):
    """Pair two streams of equal shape into a stream of tuples."""

    kind = "Zip"
    params_spec = {}
    inputs_spec = ("in0", "in1")

    def infer(self):
        self.same_shape("in0", "in1")
        return {"out": self.t("in0").with_dtype(TupleType((self.t("in0").dtype, self.t("in1").dtype)))}

    def run(self, io):
        while True:
            a = yield from io.get("in0")
            b = yield from io.get("in1")
            if a.stop != b.stop or a.done != b.done:
                raise io.fail(f"input 'in0' has {a!r} where input 'in1' has {b!r}: "
                              f"the streams' shapes differ at run time")
            yield from io.put("out", data((a.payload, b.payload)) if a.is_data else a)
            if a.done:
                return
