"""Sources and sinks: SelectorSource, IndexSource, StreamSource, Output, Feedback, Broadcast."""

from __future__ import annotations

import numpy as np
import sympy

from ..errors import StepGraphError, StepRuntimeError, StepShapeError, where
from ..token import DONE, data
from ..types import Index, Selector, StreamType
from .base import Op, StreamRef, register


class _Source(Op):
    inputs_spec = ()

    def stream_key(self) -> str | None:
        """The key of the stream data this source reads (``data``, or its name), None with ``values``."""
        return None if self.p("values") is not None else self.p("data") or self.name

    def values(self, io):
        if self.p("values") is not None:
            return self.p("values")
        key = self.p("data") or self.name
        try:
            vals = io.ctx.streams[key]
        except KeyError:
            raise StepRuntimeError(f"{where(self.kind, self.name)}: no input data {key!r} "
                                   f"(pass streams={{{key!r}: ...}} to the interpreter)") from None
        if isinstance(vals, (str, bytes)) or not hasattr(vals, "__len__"):
            raise io.fail(f"input data {key!r} must be a sequence, got {type(vals).__name__}")
        return vals

    @staticmethod
    def _int(io, v, what):
        try:
            arr = np.asarray(v)
            if arr.size != 1 or arr.dtype.kind not in "iu":
                raise TypeError
            return int(arr.reshape(-1)[0])
        except (TypeError, ValueError):
            raise io.fail(f"{what} must be an integer, got {v!r}") from None

    def length_dim(self):
        if self.p("values") is not None:
            return sympy.Integer(len(self.p("values")))
        return self.p("length") if self.p("length") is not None else self.sym("len")


@register
class SelectorSource(_Source):
    """Rank-0 stream of selectors from an array: row ``t`` lists the choices of element ``t``.

    Rows may hold -1 entries (no choice). ``values`` embeds the rows in the
    graph; otherwise they come from the interpreter's ``streams[data or name]``.
    ``k`` (optional) declares that no element chooses more than ``k`` outputs
    (an MoE's top-k), checked on every element: what a Partition routes by it
    then bounds the sum of its output counts statically (:mod:`step_hdl.counts`).
    """

    kind = "SelectorSource"
    unit = "source"
    params_spec = {"n": ("int",), "values": ("values", None), "data": ("str", None), "length": ("dim", None),
                   "k": ("int", None)}

    def infer(self):
        n, k = self.p("n"), self.p("k")
        if n < 1:
            raise self.type_error(f"n must be >= 1, got {n}")
        if k is not None and not 1 <= k <= n:
            raise self.type_error(f"k (the most choices of one element) must be in 1..{n}, got {k}")
        return {"out": StreamType(Selector(n), (self.length_dim(),))}

    def run(self, io):
        n, k = self.p("n"), self.p("k")
        for t, row in enumerate(self.values(io)):
            mask = 0
            for c in np.atleast_1d(np.asarray(row, dtype=object)).tolist():
                c = self._int(io, c, f"choice of element {t}")
                if c >= n:
                    raise io.fail(f"choice {c} of element {t} out of range for {n} outputs")
                if c >= 0:
                    mask |= 1 << c
            if k is not None and bin(mask).count("1") > k:
                raise io.fail(f"element {t} chooses {bin(mask).count('1')} outputs, more than k = {k}")
            yield from io.put("out", data(mask))
        yield from io.put("out", DONE)


@register
class IndexSource(_Source):
    """Rank-0 stream of ``[1, 1]`` int32 indices from a list (or the interpreter's data)."""

    kind = "IndexSource"
    unit = "source"
    params_spec = {"values": ("values", None), "data": ("str", None), "length": ("dim", None)}

    def infer(self):
        return {"out": StreamType(Index(), (self.length_dim(),))}

    def run(self, io):
        for t, v in enumerate(self.values(io)):
            yield from io.put("out", data(np.array([[self._int(io, v, f"element {t}")]], dtype=np.int32)))
        yield from io.put("out", DONE)


@register
class StreamSource(_Source):
    """A stream of any type from the interpreter's data: tokens, or nested lists of payloads.

    ``streams[data or name]`` is either a list of :class:`~step_hdl.token.Token`
    (sent as is, ending with done) or nested lists (``rank + 1`` levels) that
    are encoded per spec section 1. Used to drive a single operator in tests
    and unit testbenches.
    """

    kind = "StreamSource"
    params_spec = {"type": ("type",), "shape": ("dims",), "data": ("str", None), "values": ("values", None)}

    def infer(self):
        return {"out": StreamType(self.p("type"), self.p("shape"))}

    def run(self, io):
        from ..token import Token, encode
        vals = self.values(io)
        rank = len(self.p("shape")) - 1
        toks = list(vals) if vals and isinstance(vals[0], Token) else encode(vals, rank)
        if not toks or not toks[-1].done:
            raise io.fail("source tokens must end with a done token")
        for t in toks:
            if t.stop > rank:
                raise io.fail(f"source token S{t.stop} exceeds the declared rank {rank}")
            yield from io.put("out", t)


@register
class Output(Op):
    """Sink that hands its stream to the caller (``result.outputs[name]``)."""

    kind = "Output"
    wire = True
    params_spec = {}

    def infer(self):
        return {}

    def run(self, io):
        toks = []
        while True:
            t = yield from io.get("in")
            toks.append(t)
            if t.done:
                break
        io.ctx.outputs[self.name] = toks


@register
class Feedback(Op):
    """A forward reference that closes a cycle: declared with a type, bound later.

    It has no hardware: it forwards its input unchanged.
    """

    kind = "Feedback"
    wire = True
    params_spec = {"type": ("type",), "shape": ("dims",)}
    optional_inputs = ("in",)

    def infer(self):
        return {"out": StreamType(self.p("type"), self.p("shape"))}

    def bind(self, ref: StreamRef):
        if self.inputs.get("in") is not None:
            raise StepGraphError(f"Feedback '{self.name}' is bound already")
        want = self.out_types["out"]
        got = ref.type
        if got.dtype != want.dtype or got.rank != want.rank:
            raise StepShapeError(f"Feedback '{self.name}': declared {want}, bound to {ref.label} of {got}")
        # symbolic sizes are only known at run time (a loop that never ends is caught there); two known
        # sizes that differ are a mistake now
        for i, (w, g) in enumerate(zip(want.shape, got.shape)):
            if w.is_number and g.is_number and w != g:
                raise StepShapeError(f"Feedback '{self.name}': declared {want}, bound to {ref.label} of {got} "
                                     f"(dimension {i} is {g}, expected {w})")
        self.inputs["in"] = ref

    def run(self, io):
        while True:
            t = yield from io.get("in")
            yield from io.put("out", t)
            if t.done:
                return


@register
class Broadcast(Op):
    """Explicit fan-out: every token to each of ``n`` outputs."""

    kind = "Broadcast"
    unit = "broadcast"
    params_spec = {"n": ("int", 2)}

    def infer(self):
        if self.p("n") < 1:
            raise self.shape_error(f"n must be >= 1, got {self.p('n')}")
        return {f"out{i}": self.t("in") for i in range(self.p("n"))}

    def run(self, io):
        outs = list(self.out_types)
        while True:
            t = yield from io.get("in")
            yield from io.put_all(outs, t)
            if t.done:
                return
