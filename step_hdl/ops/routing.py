"""Routing operators: Partition, Reassemble, EagerMerge."""

from __future__ import annotations

import sympy

from ..process import Emitter
from ..token import DONE, data
from ..types import Selector, StreamType, Tile, dims_equal, elements_of
from .base import Op, ZERO, Variadic, chunk_out, register


@register
class Partition(Op):
    """Send each rank-``rank`` chunk of ``in`` to every output whose selector bit is set."""

    kind = "Partition"
    routes = True
    unit = "routing"
    inputs_spec = ("in", "sel")
    params_spec = {"n": ("int",), "rank": ("int", 0)}

    def infer(self):
        p, n = self.p("rank"), self.p("n")
        if n < 1:
            raise self.shape_error(f"n must be >= 1, got {n}")
        self.need_rank("in", p, "rank")
        self.need_selector("sel", n)
        st = self.t("in")
        inner = tuple(st.shape[len(st.shape) - p:]) if p else ()
        return {f"out{i}": st.with_shape((self.sym(f"n{i}"),) + inner) for i in range(n)}

    def run(self, io):
        p, n = self.p("rank"), self.p("n")
        while True:
            t = yield from io.peek("in")
            if t.stop and p == 0:
                yield from io.get("in")
                continue
            if t.done:
                yield from io.get("in")
                yield from io.put_all([f"out{i}" for i in range(n)], DONE)
                # leftover selectors (e.g. credits in a feedback loop) are drained.
                while not (yield from io.get_data("sel")).done:
                    pass
                return
            s = yield from io.get_data("sel")
            if s.done:
                raise io.fail("selector stream ended while input chunks remain", "sel")
            chunk = chunk_out((yield from io.read_chunk("in", p)), p)
            chosen = [f"out{i}" for i in range(n) if s.payload >> i & 1]
            for tok in chunk:
                yield from io.put_all(chosen, tok)   # a multi-hot copy costs one transfer


@register
class Reassemble(Variadic):
    """For each selector token, concatenate one rank-``rank`` chunk from each selected input.

    The chunks form a new dimension (size = number of set bits; ``k`` declares it
    static, checked at run time), in input-index order.
    """

    kind = "Reassemble"
    routes = True
    unit = "routing"
    params_spec = {"n": ("int",), "rank": ("int", 0), "k": ("int", None)}

    def input_ports(self):
        return super().input_ports() + ("sel",)

    def infer(self):
        p, n = self.p("rank"), self.p("n")
        self.need_selector("sel", n)
        first = self.t("in0")
        for i in range(n):
            st = self.t(f"in{i}")
            if st.rank != p:
                raise self.shape_error(f"input has rank {st.rank}, expected rank {p} (shape [N, inner {p} dims])",
                                       f"in{i}")
            if st.dtype != first.dtype:
                raise self.type_error(f"element type {st.dtype} differs from in0's {first.dtype}", f"in{i}")
            for a, b in zip(st.shape[1:], first.shape[1:]):
                if dims_equal(a, b) is False:
                    raise self.shape_error(f"inner shape {st.shape_str()} differs from in0's {first.shape_str()}",
                                           f"in{i}")
        k = sympy.Integer(self.p("k")) if self.p("k") is not None else self.sym("k")
        return {"out": first.with_shape(tuple(self.t("sel").shape) + (k,) + tuple(first.shape[1:]))}

    def run(self, io):
        p, n, k = self.p("rank"), self.p("n"), self.p("k")
        em = Emitter(io, "out", "sel")
        while True:
            s = yield from io.get("sel")
            if s.done:
                for i in range(n):
                    yield from io.expect_done(f"in{i}")
                yield from em.done()
                return
            if s.stop:
                yield from em.stop(s.stop + p + 1)
                continue
            chosen = [i for i in range(n) if s.payload >> i & 1]
            if k is not None and len(chosen) != k:
                raise io.fail(f"selector has {len(chosen)} bits set, declared k={k}", "sel")
            for i in chosen:
                chunk = yield from io.read_chunk(f"in{i}", p)
                if chunk is None:
                    raise io.fail("input ended before the selector stream", f"in{i}")
                for tok in chunk[:-1] if p else chunk:
                    yield from em.token(tok)
                yield from em.end_block(p)
            yield from em.end_block(p + 1)
            yield from em.element_done()


def _max_dims(dims):
    """One dimension for several that may differ: the dimension if they agree, else their Max."""
    distinct = []
    for d in dims:
        if not any(dims_equal(d, e) for e in distinct):
            distinct.append(d)
    return distinct[0] if len(distinct) == 1 else sympy.Max(*distinct)


@register
class EagerMerge(Variadic):
    """Forward whole rank-``rank`` chunks from whichever input has one first; ``sel`` says which."""

    kind = "EagerMerge"
    routes = True
    breaks_cycles = True
    unit = "routing"
    params_spec = {"n": ("int",), "rank": ("int", 0)}

    def infer(self):
        p, n = self.p("rank"), self.p("n")
        if n < 1:
            raise self.shape_error(f"n must be >= 1, got {n}")
        total = ZERO
        for i in range(n):
            port = f"in{i}"
            self.need_rank(port, p, "rank")
            total += elements_of(self.t(port).shape[:len(self.t(port).shape) - p])
        elem = self._join([self.t(f"in{i}").dtype for i in range(n)])
        # chunks of different inputs may differ in size (a row count per input): the merged chunk's size
        # is their Max, like a merged tile's (exact for buffers, a bound for counts)
        inner = tuple(_max_dims([self.t(f"in{i}").shape[len(self.t(f"in{i}").shape) - p + j] for i in range(n)])
                      for j in range(p)) if p else ()
        return {"out": StreamType(elem, (total,) + inner),
                "sel": StreamType(Selector(n), (total,))}

    def _join(self, types):
        """The merged element type.

        Tiles whose sizes differ merge into a tile sized by the largest
        (``Max`` of the sizes): exact for on-chip memory, an upper bound for the
        FLOPs of the merged stream.
        """
        first = types[0]
        sides = None                      # distinct row and column sizes, for one Max each at the end
        for i, t in enumerate(types[1:], 1):
            if t == first:
                continue
            if isinstance(t, Tile) and isinstance(first, Tile) and t.dtype == first.dtype:
                sides = sides or ([first.rows], [first.cols])
                for seen, d in zip(sides, (t.rows, t.cols)):
                    if not any(dims_equal(s, d) for s in seen):
                        seen.append(d)
                continue
            raise self.type_error(f"element type {t} differs from in0's {types[0]}", f"in{i}")
        if sides:
            # one n-ary Max: nesting pairwise Maxes costs sympy O(n^3) comparisons (n = 32 inputs: a minute)
            first = Tile(first.dtype, *(s[0] if len(s) == 1 else sympy.Max(*s) for s in sides))
        return first

    def run(self, io):
        p = self.p("rank")
        live = [f"in{i}" for i in range(self.p("n"))]
        while live:
            port = yield from io.wait_any(live)
            chunk = yield from io.read_chunk(port, p)
            if chunk is None:
                live.remove(port)
                continue
            for tok in chunk_out(chunk, p):
                yield from io.put("out", tok)
            yield from io.put("sel", data(1 << int(port[2:])))
        yield from io.put("out", DONE)
        yield from io.put("sel", DONE)
