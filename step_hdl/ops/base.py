"""The operator base class (:class:`Op`), stream references, parameter kinds and the registry."""


from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy

from ..errors import StepGraphError, StepShapeError, StepTypeError, where
from ..functions import Fn, fn as make_fn, fn_from_json
from ..process import Ports
from ..token import stop
from ..types import (BufferRef, Selector, StreamType, Tile, TupleType, as_dim, dim_str, dims_equal, dyn,
                    type_from_json, type_to_json)


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
    """A node of a STeP graph. Subclasses set ``kind``, ``params_spec``, the hooks and their traits.

    The traits are what the interpreter, the mapper and the model ask of an operator, so that none of them
    keeps its own list of kind names: ``memory`` (the off-chip memory it touches: ``"load"``, ``"store"`` or
    None), ``addressed`` (it takes each tile's address from a stream: a random load or store), ``routes``
    (it routes tokens by a selector), ``buffers`` (its hardware holds a whole chunk before reading it out),
    ``breaks_cycles`` (it emits without waiting for its cyclic input, so a cycle through it is well formed),
    ``takes_chunks`` (it takes a whole chunk of its input before it emits anything for it: an Accum's sum, a
    Bufferize's buffer),
    ``computes`` (it applies a function to tiles: its cost is the function's), ``unit`` (the family of
    hardware unit that runs it, the name of the mapper's adapter; None: none yet) and ``wire`` (it needs no
    unit at all: a sink or a wire).
    """

    kind = ""
    params_spec: dict = {}       # name -> (parameter kind, default); no default = required
    inputs_spec: tuple = ("in",)  # fixed input ports; variadic ops override input_ports()
    optional_inputs: tuple = ()
    memory: str | None = None
    addressed = False
    routes = False
    buffers = False
    breaks_cycles = False
    takes_chunks = False
    computes = False
    unit: str | None = None
    wire = False

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
                                   f"{self.t(port).shape_str()}; a stream's rank is its number of dimensions "
                                   f"less one: [N] is rank 0, [B, N] rank 1)", None)
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

    def stream_key(self) -> str | None:
        """The key of the stream data (``streams`` of :func:`step_hdl.interp.run`) the node reads: a source's;
        None for every other node."""
        return None

    def onchip_bytes(self):
        return ZERO

    def flops(self):
        return ZERO

    def sym(self, suffix: str):
        return dyn(f"{self.name}_{suffix}")

    def __repr__(self):
        return f"<{self.kind} '{self.name}'>"


class Variadic(Op):
    """An operator with inputs ``in0 .. in{n-1}`` (parameter ``n``)."""

    def input_ports(self):
        return tuple(f"in{i}" for i in range(self.params["n"]))


OPS: dict[str, type[Op]] = {}


def register(cls):
    OPS[cls.kind] = cls
    return cls


def chunk_out(chunk, p):
    """A chunk's tokens with its closing stop normalised to ``S_p`` (p >= 1)."""
    return chunk[:-1] + [stop(p)] if p else chunk


def _payload_shape(x):
    return tuple(x.shape) if isinstance(x, np.ndarray) else None
