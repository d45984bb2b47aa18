"""The STeP operators: shape and type inference, token-level behaviour, costs.

Each operator class checks its inputs when the node is built (so a malformed
program fails at construction with a message naming the node and port), infers
its output stream types symbolically, runs as a process in the reference
interpreter (:mod:`step_hdl.interp`), and states its off-chip traffic, on-chip
memory and FLOPs for :mod:`step_hdl.metrics` (spec section 4).

Port names: single-input operators read ``in``; variadic ones (Map, Zip,
Reassemble, EagerMerge) read ``in0``, ``in1``, ...; named roles are ``ref``,
``sel``, ``addr``, ``data``. Outputs are ``out`` (or ``out0``, ``out1``, ...),
plus ``sel`` for EagerMerge and ``pad`` for a padding Reshape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from .errors import StepGraphError, StepRuntimeError, StepShapeError, StepTypeError, where
from .functions import Fn, apply_typed, fn as make_fn, fn_from_json
from .process import Emitter, Ports, emit_block
from .token import DONE, data, stop
from .types import (BufferRef, Index, Selector, StreamType, Tile, TupleType, as_dim, dim_str, dims_equal,
                    dyn, elements_of, is_static, ragged, sum_over, type_from_json, type_to_json)

ZERO = sympy.Integer(0)


@dataclass(frozen=True)
class StreamRef:
    """One output port of a node: what a consumer connects to."""

    node: "Op"
    port: str

    @property
    def type(self) -> StreamType:
        return self.node.out_types[self.port]

    @property
    def label(self) -> str:
        return f"{self.node.name}.{self.port}"

    def __repr__(self) -> str:
        return f"<stream {self.label}: {self.type}>"


@dataclass
class Buffer:
    """A buffer in on-chip memory, as the interpreter holds it (payload of a BufferRef token)."""

    ident: int
    contents: list  # nested, as decoded from the buffered chunk
    rank: int       # nesting depth - 1

    def __eq__(self, other):
        return isinstance(other, Buffer) and self.ident == other.ident

    def __repr__(self):
        return f"buf#{self.ident}"


# --------------------------------------------------------------------------- parameter kinds

def _p_int(v, key):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise StepTypeError(f"parameter {key!r} must be an integer, got {v!r}")
    return int(v)


def _p_list(v, key, what):
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise StepTypeError(f"parameter {key!r} must be a list of {what}, got {v!r}")
    return list(v)


def _p_dims(v, key):
    return tuple(as_dim(d) for d in _p_list(v, key, "dimensions"))


def _p_fn(v, key):
    if isinstance(v, str):
        return make_fn(v)
    if isinstance(v, Fn):
        return v
    raise StepTypeError(f"parameter {key!r} must be a function name or fn(...), got {v!r}")


def _p_type(v, key):
    if not isinstance(v, (Tile, Selector, BufferRef, TupleType)):
        raise StepTypeError(f"parameter {key!r} must be an element type (Tile, Selector, ...), got {v!r}")
    return v


def _p_values(v, key):
    if v is None:
        return None
    if isinstance(v, np.ndarray):
        v = v.tolist()
    return _p_list(v, key, "values")


def _p_ints(v, key):
    return tuple(_p_int(x, key) for x in _p_list(v, key, "integers"))


# per kind: (check a Python value, to JSON, from JSON); the checks take (value, key)
PARAM_KINDS = {
    "int": (_p_int, lambda v: v, _p_int),
    "bool": (lambda v, k: bool(v), lambda v: v, lambda v, k: v),
    "str": (lambda v, k: str(v), lambda v: v, lambda v, k: v),
    "dim": (lambda v, k: as_dim(v), dim_str, lambda v, k: as_dim(v)),
    "dims": (_p_dims, lambda v: [dim_str(d) for d in v], _p_dims),
    "ints": (_p_ints, list, _p_ints),
    "fn": (_p_fn, lambda v: v.to_json(), lambda v, k: fn_from_json(v)),
    "type": (_p_type, type_to_json, lambda v, k: type_from_json(v)),
    "json": (lambda v, k: v, lambda v: v, lambda v, k: v),
    "values": (_p_values, lambda v: v, _p_values),
}


# --------------------------------------------------------------------------- base class

class Op:
    """A node of a STeP graph. Subclasses set ``kind``, ``params_spec`` and the hooks."""

    kind = ""
    params_spec: dict = {}       # name -> (parameter kind, default); no default = required
    inputs_spec: tuple = ("in",)  # fixed input ports; variadic ops override input_ports()
    optional_inputs: tuple = ()

    def __init__(self, graph, name: str, inputs: dict, params: dict):
        self.graph = graph
        self.name = name
        self.params = self._check_params(params)
        self.inputs: dict[str, StreamRef | None] = {}
        for port in self.input_ports():
            ref = inputs.get(port)
            if ref is None and port not in self.optional_inputs:
                raise StepGraphError(f"{where(self.kind, name, port)}: input is not connected")
            if ref is not None and not isinstance(ref, StreamRef):
                raise StepGraphError(f"{where(self.kind, name, port)}: expected a stream, got {ref!r}")
            self.inputs[port] = ref
        unknown = set(inputs) - set(self.input_ports())
        if unknown:
            raise StepGraphError(f"{self.kind} '{name}': unknown input port(s) {sorted(unknown)}; "
                                 f"ports are {list(self.input_ports())}")
        self.out_types: dict[str, StreamType] = self.infer()

    # ---- structure
    def input_ports(self) -> tuple:
        return self.inputs_spec

    def __getitem__(self, port: str) -> StreamRef:
        if port not in self.out_types:
            raise StepGraphError(f"{self.kind} '{self.name}' has no output {port!r}; "
                                 f"outputs are {list(self.out_types)}")
        return StreamRef(self, port)

    @property
    def out(self) -> StreamRef:
        return self["out"]

    @property
    def outputs(self) -> list[StreamRef]:
        return [StreamRef(self, p) for p in self.out_types]

    def t(self, port: str) -> StreamType:
        return self.inputs[port].type

    def p(self, key):
        return self.params[key]

    def _check_params(self, params: dict) -> dict:
        out = {}
        for key, (kind, *default) in self.params_spec.items():
            if key in params and params[key] is not None:
                try:
                    out[key] = PARAM_KINDS[kind][0](params[key], key)
                except StepTypeError as exc:
                    raise StepTypeError(f"{self.kind} '{self.name}': {exc}") from None
            elif default:
                out[key] = default[0]
            else:
                raise StepTypeError(f"{self.kind} '{self.name}': missing parameter {key!r}")
        unknown = set(k for k, v in params.items() if v is not None) - set(self.params_spec)
        if unknown:
            raise StepTypeError(f"{self.kind} '{self.name}': unknown parameter(s) {sorted(unknown)}; "
                                f"it takes {sorted(self.params_spec)}")
        return out

    def params_json(self) -> dict:
        return {k: (PARAM_KINDS[self.params_spec[k][0]][1](v) if v is not None else None)
                for k, v in self.params.items()}

    @classmethod
    def params_from_json(cls, obj: dict, name: str = "?") -> dict:
        if not isinstance(obj, dict):
            raise StepTypeError(f"{cls.kind} '{name}': params must be a JSON object, got {obj!r}")
        out = {}
        for k, v in obj.items():
            if k not in cls.params_spec:
                raise StepTypeError(f"{cls.kind} '{name}': unknown parameter {k!r}; it takes {sorted(cls.params_spec)}")
            try:
                out[k] = None if v is None else PARAM_KINDS[cls.params_spec[k][0]][2](v, k)
            except StepTypeError as exc:
                text = str(exc)
                if f"parameter {k!r}" not in text:
                    text = f"parameter {k!r}: {text}"
                raise StepTypeError(f"{cls.kind} '{name}': {text}") from None
            except (TypeError, ValueError, KeyError) as exc:
                raise StepTypeError(f"{cls.kind} '{name}' parameter {k!r}: cannot read {v!r} ({exc})") from None
        return out

    # ---- errors
    def shape_error(self, msg, port=None):
        return StepShapeError(f"{where(self.kind, self.name, port)}: {msg}")

    def type_error(self, msg, port=None):
        return StepTypeError(f"{where(self.kind, self.name, port)}: {msg}")

    def fn_type(self, f: Fn, *types):
        try:
            return f.spec.out_type(f, *types)
        except StepTypeError as exc:
            raise self.type_error(str(exc)) from None

    def need_rank(self, port, rank, what):
        r = self.t(port).rank
        if rank > r:
            raise self.shape_error(f"{what} {rank} > input rank {r} (input '{port}' has shape "
                                   f"{self.t(port).shape_str()})", None)
        if rank < 0:
            raise self.shape_error(f"{what} must be >= 0, got {rank}")

    def need_tile(self, port) -> Tile:
        t = self.t(port).dtype
        if not isinstance(t, Tile):
            raise self.type_error(f"expected a stream of tiles, got {t}", port)
        return t

    def need_selector(self, port, n=None) -> Selector:
        t = self.t(port).dtype
        if not isinstance(t, Selector):
            raise self.type_error(f"expected a selector stream, got {t}", port)
        if n is not None and t.n != n:
            raise self.type_error(f"selector chooses among {t.n}, but there are {n} streams", port)
        return t

    def need_index(self, port):
        t = self.t(port).dtype
        if not (isinstance(t, Tile) and t.dtype.is_int and dims_equal(t.rows, 1) and dims_equal(t.cols, 1)):
            raise self.type_error(f"expected a stream of [1, 1] integer indices, got {t}", port)

    def same_shape(self, a, b):
        sa, sb = self.t(a).shape, self.t(b).shape
        ok = len(sa) == len(sb) and all(dims_equal(x, y) for x, y in zip(sa, sb))
        if not ok:
            raise self.shape_error(f"input '{a}' has shape {self.t(a).shape_str()} but input '{b}' "
                                   f"has shape {self.t(b).shape_str()}; they must be equal")

    # ---- hooks
    def infer(self) -> dict[str, StreamType]:
        raise NotImplementedError

    def run(self, io: Ports):
        raise NotImplementedError

    def offchip_bytes(self):
        return ZERO

    def onchip_bytes(self):
        return ZERO

    def flops(self):
        return ZERO

    def sym(self, suffix: str):
        return dyn(f"{self.name}_{suffix}")

    def __repr__(self):
        return f"<{self.kind} '{self.name}'>"


class _Variadic(Op):
    """An operator with inputs ``in0 .. in{n-1}`` (parameter ``n``)."""

    def input_ports(self):
        return tuple(f"in{i}" for i in range(self.params["n"]))


OPS: dict[str, type[Op]] = {}


def register(cls):
    OPS[cls.kind] = cls
    return cls


def _chunk_out(chunk, p):
    """A chunk's tokens with its closing stop normalised to ``S_p`` (p >= 1)."""
    return chunk[:-1] + [stop(p)] if p else chunk


def _payload_shape(x):
    return tuple(x.shape) if isinstance(x, np.ndarray) else None


# --------------------------------------------------------------------------- sources and sinks

class _Source(Op):
    inputs_spec = ()

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
    """

    kind = "SelectorSource"
    params_spec = {"n": ("int",), "values": ("values", None), "data": ("str", None), "length": ("dim", None)}

    def infer(self):
        if self.p("n") < 1:
            raise self.type_error(f"n must be >= 1, got {self.p('n')}")
        return {"out": StreamType(Selector(self.p("n")), (self.length_dim(),))}

    def run(self, io):
        n = self.p("n")
        for t, row in enumerate(self.values(io)):
            mask = 0
            for c in np.atleast_1d(np.asarray(row, dtype=object)).tolist():
                c = self._int(io, c, f"choice of element {t}")
                if c >= n:
                    raise io.fail(f"choice {c} of element {t} out of range for {n} outputs")
                if c >= 0:
                    mask |= 1 << c
            yield from io.put("out", data(mask))
        yield from io.put("out", DONE)


@register
class IndexSource(_Source):
    """Rank-0 stream of ``[1, 1]`` int32 indices from a list (or the interpreter's data)."""

    kind = "IndexSource"
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
        from .token import Token, encode
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


# --------------------------------------------------------------------------- off-chip memory

class _OffChip(Op):
    def tensor(self):
        name = self.p("tensor")
        try:
            return self.graph.tensors[name]
        except KeyError:
            raise self.type_error(f"unknown off-chip tensor {name!r}; declared: "
                                  f"{sorted(self.graph.tensors) or 'none'}") from None

    def tile_type(self) -> Tile:
        if len(self.p("tile")) != 2:
            raise self.type_error(f"tile must be [rows, cols], got {list(self.p('tile'))}")
        tr, tc = self.p("tile")
        spec = self.tensor()
        for what, t, full in (("rows", tr, spec.rows), ("cols", tc, spec.cols)):
            if is_static(t) and int(t) < 1:
                raise self.shape_error(f"tile {what} must be >= 1, got {t}")
            if is_static(t) and is_static(full) and int(full) % int(t):
                raise self.shape_error(f"tile {what} {t} does not divide tensor '{spec.name}' {what} {full}")
        return Tile(spec.dtype, tr, tc)

    def grid(self, io):
        arr = io.ctx.memory.array(self.p("tensor"))
        tr, tc = (int(d.subs(io.ctx.bindings)) for d in self.p("tile"))
        return arr, tr, tc

    def tiles_moved(self):
        return self.out_types["out"].elements

    def offchip_bytes(self):
        return sum_over(self.tiles_moved(), self.tile_type().nbytes)

    def onchip_bytes(self):
        return 2 * self.tile_type().nbytes  # double-buffered tile


@register
class LinearOffChipLoad(_OffChip):
    """Read a tiled view of an off-chip tensor with an affine tile pattern.

    For every element of ``ref`` (or once, without ``ref``) emit the tiles at
    tile indices ``base + Σ index_d · stride_d`` over the output dimensions
    (ref dims first, then ``out_shape``), where a tile index is the row-major
    position in the tensor's grid of ``tile``-sized tiles. Stride 0 re-reads.
    """

    kind = "LinearOffChipLoad"
    inputs_spec = ("ref",)
    optional_inputs = ("ref",)
    params_spec = {"tensor": ("str",), "tile": ("dims",), "out_shape": ("dims",), "stride": ("ints",),
                   "base": ("int", 0)}

    def infer(self):
        tile = self.tile_type()
        ref = self.inputs.get("ref")
        lead = ref.type.shape if ref is not None else ()
        shape = tuple(lead) + tuple(self.p("out_shape"))
        if not self.p("out_shape") and ref is None:
            raise self.shape_error("out_shape needs at least one dimension when there is no ref stream")
        if len(self.p("stride")) != len(shape):
            raise self.shape_error(f"stride has {len(self.p('stride'))} entries but the output has "
                                   f"{len(shape)} dimensions {['ref'] * len(lead) + ['out'] * len(self.p('out_shape'))}")
        return {"out": StreamType(tile, shape)}

    def _block(self, io, lead_idx):
        arr, tr, tc = self.grid(io)
        out_shape = [int(d.subs(io.ctx.bindings)) for d in self.p("out_shape")]
        strides = self.p("stride")
        base = self.p("base") + sum(i * s for i, s in zip(lead_idx, strides))
        inner = strides[len(lead_idx):]

        def build(level, offset):
            if level == len(out_shape):
                return io.ctx.memory.read_tile(self, arr, offset, tr, tc)
            return [build(level + 1, offset + j * inner[level]) for j in range(out_shape[level])]

        return build(0, base)

    def run(self, io):
        q = len(self.p("out_shape")) - 1
        if self.inputs.get("ref") is None:
            em = Emitter(io, "out")
            yield from _emit_whole(em, self._block(io, ()), q)
            yield from em.done()
            return
        em = Emitter(io, "out", "ref")
        idx = [0] * len(self.t("ref").shape)
        while True:
            t = yield from io.get("ref")
            if t.done:
                yield from em.done()
                return
            if t.stop:
                yield from em.stop(t.stop + q + 1)
                _advance(idx, t.stop)
                continue
            yield from emit_block(em, self._block(io, idx), q + 1)
            yield from em.element_done()
            idx[-1] += 1


def _emit_whole(em, nested, q):
    """Emit a whole rank-q stream body (no block end beyond its own S_q closes)."""
    if q == 0:
        for x in nested:
            yield from em.data(x)
        return
    for item in nested:
        yield from emit_block(em, item, q)


def _advance(idx, k):
    """Advance a multi-index (outermost first) past stop ``S_k``."""
    idx[-1 - k] += 1
    for j in range(k):
        idx[-1 - j] = 0


@register
class LinearOffChipStore(_OffChip):
    """Write the tiles of ``in`` to consecutive tile slots (row-major grid order) from ``base``."""

    kind = "LinearOffChipStore"
    params_spec = {"tensor": ("str",), "tile": ("dims",), "base": ("int", 0)}

    def infer(self):
        tile = self.tile_type()
        got = self.need_tile("in")
        if got.dtype != tile.dtype:
            raise self.type_error(f"stores {got.dtype} tiles into {tile.dtype} tensor '{self.p('tensor')}'", "in")
        for a, b, what in ((got.rows, tile.rows, "rows"), (got.cols, tile.cols, "cols")):
            if dims_equal(a, b) is False:
                raise self.shape_error(f"input tiles have {what} {dim_str(a)}, the store's tile has {dim_str(b)}", "in")
        return {}

    def tiles_moved(self):
        return self.t("in").elements

    def run(self, io):
        arr, tr, tc = self.grid(io)
        slot = self.p("base")
        while True:
            t = yield from io.get("in")
            if t.done:
                return
            if t.stop == 0:
                io.ctx.memory.write_tile(self, arr, slot, tr, tc, t.payload)
                slot += 1


@register
class RandomOffChipLoad(_OffChip):
    """One tile read per address token (tile index ``base + addr``); shape of ``addr``."""

    kind = "RandomOffChipLoad"
    inputs_spec = ("addr",)
    params_spec = {"tensor": ("str",), "tile": ("dims",), "base": ("int", 0)}

    def infer(self):
        self.need_index("addr")
        return {"out": StreamType(self.tile_type(), self.t("addr").shape)}

    def run(self, io):
        arr, tr, tc = self.grid(io)
        while True:
            t = yield from io.get("addr")
            if t.stop == 0 and not t.done:
                t = data(io.ctx.memory.read_tile(self, arr, self.p("base") + int(t.payload.reshape(-1)[0]), tr, tc))
            yield from io.put("out", t)
            if t.done:
                return


@register
class RandomOffChipStore(_OffChip):
    """One tile write per (address, data) pair; emits the written address as acknowledgement."""

    kind = "RandomOffChipStore"
    inputs_spec = ("addr", "data")
    params_spec = {"tensor": ("str",), "tile": ("dims",), "base": ("int", 0)}

    def infer(self):
        self.need_index("addr")
        tile = self.tile_type()
        got = self.need_tile("data")
        if got.dtype != tile.dtype:
            raise self.type_error(f"stores {got.dtype} tiles into {tile.dtype} tensor '{self.p('tensor')}'", "data")
        self.same_shape("addr", "data")
        return {"out": StreamType(Index(), self.t("addr").shape)}

    def tiles_moved(self):
        return self.t("data").elements

    def run(self, io):
        arr, tr, tc = self.grid(io)
        while True:
            a = yield from io.get("addr")
            d = yield from io.get("data")
            if a.stop != d.stop or a.done != d.done:
                raise io.fail(f"address token {a!r} does not line up with data token {d!r}")
            if a.is_data:
                io.ctx.memory.write_tile(self, arr, self.p("base") + int(a.payload.reshape(-1)[0]), tr, tc, d.payload)
            yield from io.put("out", a)
            if a.done:
                return


# --------------------------------------------------------------------------- on-chip memory

@register
class Bufferize(Op):
    """Gather each rank-``rank`` chunk into an on-chip buffer; emit one reference per chunk."""

    kind = "Bufferize"
    params_spec = {"rank": ("int",)}

    def infer(self):
        b = self.p("rank")
        if b < 1:
            raise self.shape_error(f"rank must be >= 1, got {b}")
        self.need_rank("in", b, "rank")
        st = self.t("in")
        return {"out": StreamType(BufferRef(st.dtype, st.shape[-b:]), st.shape[:-b])}

    def onchip_bytes(self):
        return self.t("in").dtype.nbytes + 2 * self.out_types["out"].dtype.nbytes

    def run(self, io):
        from .token import decode
        b = self.p("rank")
        while True:
            chunk = yield from io.read_chunk("in", b)
            if chunk is None:
                yield from io.put("out", DONE)
                return
            close = chunk[-1].stop
            body = chunk[:-1] + [stop(b - 1)] if b > 1 else chunk[:-1]
            nested = decode(body + [DONE], b - 1)
            io.ctx.buffers += 1
            yield from io.put("out", data(Buffer(io.ctx.buffers, nested, b - 1)))
            if close > b:
                yield from io.put("out", stop(close - b))


@register
class Streamify(Op):
    """Emit each buffer's contents, once or repeatedly.

    ``repeat`` (static count) adds one dimension of that size; a ``ref`` stream
    whose shape is the buffer stream's shape plus ``c`` inner dimensions repeats
    each buffer once per element of those ``c`` dimensions. Optional
    ``read_shape`` + ``read_stride`` read the buffer's flattened elements with an
    affine pattern instead of linearly.
    """

    kind = "Streamify"
    inputs_spec = ("in", "ref")
    optional_inputs = ("ref",)
    params_spec = {"repeat": ("int", None), "read_shape": ("dims", None), "read_stride": ("ints", None)}

    def infer(self):
        bt = self.t("in").dtype
        if not isinstance(bt, BufferRef):
            raise self.type_error(f"expected a stream of buffer references, got {bt}", "in")
        outer = self.t("in").shape
        if self.inputs.get("ref") is not None and self.p("repeat") is not None:
            raise self.shape_error("give either a ref stream or a static repeat count, not both")
        if self.inputs.get("ref") is not None:
            ref = self.t("ref").shape
            if len(ref) < len(outer) or any(dims_equal(a, b) is False for a, b in zip(ref, outer)):
                raise self.shape_error(f"ref shape {self.t('ref').shape_str()} must start with the buffer "
                                       f"stream's shape {self.t('in').shape_str()}", "ref")
            mid = tuple(ref[len(outer):])
        elif self.p("repeat") is not None:
            if self.p("repeat") < 1:
                raise self.shape_error(f"repeat must be >= 1, got {self.p('repeat')}")
            mid = (sympy.Integer(self.p("repeat")),)
        else:
            mid = ()
        inner = bt.shape
        if self.p("read_shape") is not None:
            if self.p("read_stride") is None or len(self.p("read_stride")) != len(self.p("read_shape")):
                raise self.shape_error("read_stride needs one entry per read_shape dimension")
            inner = self.p("read_shape")
        self._mid = len(mid)
        return {"out": StreamType(bt.dtype, tuple(outer) + mid + tuple(inner))}

    def _view(self, buf: Buffer, io):
        if self.p("read_shape") is None:
            return buf.contents
        from .token import leaves
        flat = leaves(buf.contents, buf.rank)
        shape = [int(d.subs(io.ctx.bindings)) for d in self.p("read_shape")]
        strides = self.p("read_stride")

        def build(level, off):
            if level == len(shape):
                if off >= len(flat):
                    raise io.fail(f"read pattern reaches element {off} of a {len(flat)}-element buffer")
                return flat[off]
            return [build(level + 1, off + j * strides[level]) for j in range(shape[level])]
        return build(0, 0)

    def run(self, io):
        em = Emitter(io, "out", "in")
        q = len(self.out_types["out"].shape) - len(self.t("in").shape)  # dims added per buffer
        inner_rank = q - self._mid
        has_ref = self.inputs.get("ref") is not None
        while True:
            t = yield from io.get("in")
            if t.done:
                if has_ref:
                    yield from io.expect_done("ref")
                yield from em.done()
                return
            if t.stop:
                if has_ref and self._mid == 0:
                    # the ref has the buffer stream's shape: its stop here lines up with this one
                    r = yield from io.peek("ref")
                    if r.stop:
                        yield from io.get("ref")
                yield from em.stop(t.stop + q)
                continue
            view = self._view(t.payload, io)
            if has_ref:
                # one rank-c chunk of the ref: the view once per data element; a
                # closing stop above c lines up with the buffer stream's next stop.
                chunk = yield from io.read_chunk("ref", self._mid)
                if chunk is None:
                    raise io.fail("ref stream ended before the buffer stream", "ref")
                for r in chunk:
                    if r.is_data:
                        yield from emit_block(em, view, inner_rank)
                    elif r.stop < self._mid:
                        yield from em.stop(r.stop + inner_rank)
                if self._mid:
                    yield from em.end_block(q)
            elif self._mid:
                for _ in range(self.p("repeat")):
                    yield from emit_block(em, view, inner_rank)
                yield from em.end_block(q)
            else:
                yield from emit_block(em, view, inner_rank)
            yield from em.element_done()


# --------------------------------------------------------------------------- routing

@register
class Partition(Op):
    """Send each rank-``rank`` chunk of ``in`` to every output whose selector bit is set."""

    kind = "Partition"
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
            chunk = _chunk_out((yield from io.read_chunk("in", p)), p)
            chosen = [f"out{i}" for i in range(n) if s.payload >> i & 1]
            for tok in chunk:
                yield from io.put_all(chosen, tok)   # a multi-hot copy costs one transfer


@register
class Reassemble(_Variadic):
    """For each selector token, concatenate one rank-``rank`` chunk from each selected input.

    The chunks form a new dimension (size = number of set bits; ``k`` declares it
    static, checked at run time), in input-index order.
    """

    kind = "Reassemble"
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
class EagerMerge(_Variadic):
    """Forward whole rank-``rank`` chunks from whichever input has one first; ``sel`` says which."""

    kind = "EagerMerge"
    params_spec = {"n": ("int",), "rank": ("int", 0)}

    def infer(self):
        p, n = self.p("rank"), self.p("n")
        if n < 1:
            raise self.shape_error(f"n must be >= 1, got {n}")
        first = self.t("in0")
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
            for tok in _chunk_out(chunk, p):
                yield from io.put("out", tok)
            yield from io.put("sel", data(1 << int(port[2:])))
        yield from io.put("out", DONE)
        yield from io.put("sel", DONE)


# --------------------------------------------------------------------------- compute

@register
class Map(_Variadic):
    """Apply ``fn`` element-wise to one stream or two streams of equal shape."""

    kind = "Map"
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


# --------------------------------------------------------------------------- shape

@register
class Flatten(Op):
    """Merge dimensions ``lo..hi`` (ranks, innermost 0) into one.

    Stops inside the merged range disappear (become ``S_lo`` when ``lo >= 1``,
    since the dimensions below ``lo`` still end there); higher ones are
    renumbered down by ``hi - lo``.
    """

    kind = "Flatten"
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
    """

    kind = "Reshape"
    params_spec = {"rank": ("int",), "chunk": ("int",), "pad": ("json", None)}

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
        if self.p("pad") is not None:
            if b != 0:
                raise self.shape_error(f"padding only applies at rank 0, got rank {b}")
            if not isinstance(st.dtype, Tile) or not (is_static(st.dtype.rows) and is_static(st.dtype.cols)):
                raise self.type_error(f"padding needs static-size tiles, got {st.dtype}", "in")
        elif is_static(d) and not divisible:
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
            from .functions import cast
            tt = self.t("in").dtype
            padv = cast(np.full((int(tt.rows), int(tt.cols)), self.p("pad")), tt.dtype)  # bf16: rounded

        def close_run():
            nonlocal c
            if c:
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
                    if c == s:
                        yield from em.stop(b + 1)
                        c = 0
                    else:
                        yield from em.stop(b)
                else:
                    if c != s:
                        raise io.fail(f"chunk {s} does not divide a run of {c} rank-{b} elements "
                                      f"(dimension D{b} is not a multiple of {s})")
                    yield from em.stop(t.stop + 1)
                    c = 0


@register
class Promote(Op):
    """Add a new outermost dimension of size 1 (0 for an empty stream)."""

    kind = "Promote"
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
