"""The STeP graph: build programmatically, validate, order, serialize, draw.

>>> g = Graph("example")
>>> g.tensor("x", rows=64, cols=256, dtype="fp32")
>>> x = g.load("x", tile=(16, 256), out_shape=[4], stride=[1])
>>> y = g.map(x, "silu")
>>> g.store(y, "y", tile=(16, 256))        # needs g.tensor("y", ...) first

Every builder method checks its inputs at once and raises a
:class:`~step_hdl.errors.StepError` naming the node and port. A stream feeds
exactly one consumer; use :meth:`Graph.broadcast` to fan out. Cycles are closed
with :meth:`Graph.feedback` and must pass through an EagerMerge or Bufferize.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import sympy

from .cycles import cycles
from .errors import StepGraphError, StepTypeError
from .functions import Fn, fn as make_fn
from .ops import OPS, Feedback, Op, StreamRef
from .types import DType, StreamType, as_dim, dim_str, dtype as make_dtype


@dataclass(frozen=True)
class TensorSpec:
    """An off-chip tensor: a ``[rows, cols]`` matrix of one element type."""

    name: str
    rows: sympy.Expr
    cols: sympy.Expr
    dtype: DType

    def to_json(self) -> dict:
        return {"rows": dim_str(self.rows), "cols": dim_str(self.cols), "dtype": self.dtype.name}


class Graph:
    """A STeP program under construction."""

    def __init__(self, name: str = "step"):
        self.name = name
        self.nodes: dict[str, Op] = {}
        self.tensors: dict[str, TensorSpec] = {}
        self.consumers: dict[tuple[str, str], tuple[str, str]] = {}

    # ------------------------------------------------------------------ building
    def tensor(self, name: str, rows, cols, dtype) -> TensorSpec:
        """Declare an off-chip tensor."""
        if name in self.tensors:
            raise StepGraphError(f"off-chip tensor {name!r} is declared twice")
        try:
            spec = TensorSpec(name, as_dim(rows), as_dim(cols), make_dtype(dtype))
        except StepTypeError as exc:
            raise StepTypeError(f"off-chip tensor {name!r}: {exc}") from None
        self.tensors[name] = spec
        return spec

    def add(self, kind: str, name: str | None = None, inputs: dict | None = None, **params) -> Op:
        """Add a node of operator ``kind``; the typed builder methods below call this."""
        try:
            cls = OPS[kind]
        except (KeyError, TypeError):
            raise StepGraphError(f"node {name!r}: unknown operator {kind!r}; known operators: "
                                 f"{', '.join(sorted(OPS))}") from None
        name = name or self._fresh(kind)
        if name in self.nodes:
            raise StepGraphError(f"{kind} '{name}': a node with this name exists already "
                                 f"({self.nodes[name].kind})")
        inputs = {k: v for k, v in (inputs or {}).items()}
        seen: dict = {}
        for port, ref in inputs.items():
            if isinstance(ref, StreamRef):
                self._check_owned(kind, name, port, ref)
                self._check_free(kind, name, port, ref)
                if ref.label in seen:
                    raise StepGraphError(f"{kind} '{name}' port '{port}': stream {ref.label} already feeds port "
                                         f"'{seen[ref.label]}' of this node; use broadcast() to copy it")
                seen[ref.label] = port
        node = cls(self, name, inputs, params)
        for port, ref in node.inputs.items():
            if ref is not None:
                self.consumers[(ref.node.name, ref.port)] = (name, port)
        self.nodes[name] = node
        return node

    def _fresh(self, kind: str) -> str:
        i = 0
        while f"{kind.lower()}{i}" in self.nodes:
            i += 1
        return f"{kind.lower()}{i}"

    def _check_owned(self, kind, name, port, ref):
        if self.nodes.get(ref.node.name) is not ref.node:
            raise StepGraphError(f"{kind} '{name}' port '{port}': stream {ref.label} belongs to another graph")

    def _check_free(self, kind, name, port, ref):
        used = self.consumers.get((ref.node.name, ref.port))
        if used is not None:
            other = self.nodes[used[0]]
            raise StepGraphError(
                f"{kind} '{name}' port '{port}': stream {ref.label} is already consumed by "
                f"{other.kind} '{other.name}' port '{used[1]}'; a stream has one consumer, "
                f"use broadcast() to copy it")

    # typed builders ----------------------------------------------------------
    def load(self, tensor, tile, out_shape, stride, ref=None, base=0, name=None) -> StreamRef:
        """LinearOffChipLoad: see :class:`step_hdl.ops.LinearOffChipLoad`."""
        return self.add("LinearOffChipLoad", name, {"ref": ref}, tensor=tensor, tile=tile,
                        out_shape=out_shape, stride=stride, base=base).out

    def store(self, stream, tensor, tile, base=0, name=None) -> Op:
        """LinearOffChipStore."""
        return self.add("LinearOffChipStore", name, {"in": stream}, tensor=tensor, tile=tile, base=base)

    def random_load(self, addr, tensor, tile, base=0, name=None) -> StreamRef:
        """RandomOffChipLoad."""
        return self.add("RandomOffChipLoad", name, {"addr": addr}, tensor=tensor, tile=tile, base=base).out

    def random_store(self, addr, data, tensor, tile, base=0, name=None) -> StreamRef:
        """RandomOffChipStore; returns the acknowledgement stream."""
        return self.add("RandomOffChipStore", name, {"addr": addr, "data": data}, tensor=tensor,
                        tile=tile, base=base).out

    def bufferize(self, stream, rank, name=None) -> StreamRef:
        return self.add("Bufferize", name, {"in": stream}, rank=rank).out

    def streamify(self, buffers, ref=None, repeat=None, read_shape=None, read_stride=None, transpose=False,
                  name=None) -> StreamRef:
        """Streamify; ``transpose`` reads each rank-2 buffer ``[r, c]`` column by column (``[c, r]``)."""
        extra = {"transpose": True} if transpose else {}
        return self.add("Streamify", name, {"in": buffers, "ref": ref}, repeat=repeat, read_shape=read_shape,
                        read_stride=read_stride, **extra).out

    def partition(self, stream, sel, n, rank=0, name=None) -> list[StreamRef]:
        node = self.add("Partition", name, {"in": stream, "sel": sel}, n=n, rank=rank)
        return node.outputs

    def reassemble(self, streams, sel, rank=0, k=None, name=None) -> StreamRef:
        inputs = {f"in{i}": s for i, s in enumerate(streams)}
        inputs["sel"] = sel
        return self.add("Reassemble", name, inputs, n=len(streams), rank=rank, k=k).out

    def eager_merge(self, streams, rank=0, name=None) -> tuple[StreamRef, StreamRef]:
        node = self.add("EagerMerge", name, {f"in{i}": s for i, s in enumerate(streams)}, n=len(streams), rank=rank)
        return node["out"], node["sel"]

    def map(self, streams, fn, name=None, **fn_params) -> StreamRef:
        """Map ``fn`` (a name or :func:`~step_hdl.functions.fn`) over one or two streams."""
        name = name or self._fresh("Map")
        if isinstance(streams, StreamRef):
            streams = [streams]
        if not isinstance(streams, (list, tuple)) or not all(isinstance(s, StreamRef) for s in streams):
            raise StepGraphError(f"Map '{name}': expected a stream or a list of streams, got {streams!r}")
        f = self._fn(fn, name, "Map", fn_params)
        return self.add("Map", name, {f"in{i}": s for i, s in enumerate(streams)}, fn=f, n=len(streams)).out

    def accum(self, stream, update, init, rank=1, keep=0, name=None) -> StreamRef:
        """Accum; ``keep`` inner dimensions are positions reduced separately (see ops.Accum)."""
        name = name or self._fresh("Accum")
        return self.add("Accum", name, {"in": stream}, update=self._fn(update, name, "Accum"),
                        init=self._fn(init, name, "Accum"), rank=rank, keep=keep or None).out

    def scan(self, stream, update, init, rank=1, name=None) -> StreamRef:
        name = name or self._fresh("Scan")
        return self.add("Scan", name, {"in": stream}, update=self._fn(update, name, "Scan"),
                        init=self._fn(init, name, "Scan"), rank=rank).out

    def flat_map(self, stream, fn, rank=None, name=None) -> StreamRef:
        name = name or self._fresh("FlatMap")
        return self.add("FlatMap", name, {"in": stream}, fn=self._fn(fn, name, "FlatMap"), rank=rank).out

    def flatten(self, stream, lo, hi, name=None) -> StreamRef:
        return self.add("Flatten", name, {"in": stream}, lo=lo, hi=hi).out

    def reshape(self, stream, rank, chunk, pad=None, partial=False, name=None):
        """Reshape; returns ``out`` or, with ``pad``, ``(out, pad_flags)``; ``partial`` keeps a short last
        chunk."""
        extra = {"partial": True} if partial else {}
        node = self.add("Reshape", name, {"in": stream}, rank=rank, chunk=chunk, pad=pad, **extra)
        return (node["out"], node["pad"]) if pad is not None else node["out"]

    def promote(self, stream, name=None) -> StreamRef:
        return self.add("Promote", name, {"in": stream}).out

    def expand(self, stream, ref, rank=1, name=None) -> StreamRef:
        return self.add("Expand", name, {"in": stream, "ref": ref}, rank=rank).out

    def repeat(self, stream, count, name=None) -> StreamRef:
        """RepeatStatic: the static-repeat form of Expand."""
        return self.add("RepeatStatic", name, {"in": stream}, count=count).out

    def zip(self, a, b, name=None) -> StreamRef:
        return self.add("Zip", name, {"in0": a, "in1": b}).out

    def broadcast(self, stream, n=2, name=None) -> list[StreamRef]:
        return self.add("Broadcast", name, {"in": stream}, n=n).outputs

    def selector_source(self, n, values=None, data=None, length=None, name=None, k=None) -> StreamRef:
        """Selectors over ``n`` outputs; ``k``: no element chooses more than ``k`` of them (checked)."""
        return self.add("SelectorSource", name, {}, n=n, values=values, data=data, length=length, k=k).out

    def index_source(self, values=None, data=None, length=None, name=None) -> StreamRef:
        return self.add("IndexSource", name, {}, values=values, data=data, length=length).out

    def source(self, stream_type: StreamType, data=None, values=None, name=None) -> StreamRef:
        """A stream of any type whose tokens (or nested values) come from the interpreter's ``streams``."""
        return self.add("StreamSource", name, {}, type=stream_type.dtype, shape=stream_type.shape, data=data,
                        values=values).out

    def output(self, stream, name=None) -> Op:
        """A sink whose tokens the interpreter returns in ``result.outputs[name]``."""
        return self.add("Output", name, {"in": stream})

    def feedback(self, stream_type: StreamType, name=None) -> StreamRef:
        """A forward reference for a cycle; close it later with :meth:`bind`."""
        return self.add("Feedback", name, {}, type=stream_type.dtype, shape=stream_type.shape).out

    def bind(self, feedback: StreamRef, stream: StreamRef) -> None:
        """Connect ``stream`` to a :meth:`feedback` placeholder."""
        node = feedback.node
        if not isinstance(node, Feedback):
            raise StepGraphError(f"bind() needs a stream made by feedback(), got {feedback.label}")
        self._check_free("Feedback", node.name, "in", stream)
        node.bind(stream)
        self.consumers[(stream.node.name, stream.port)] = (node.name, "in")

    def _fn(self, f, node, kind, params=None):
        if isinstance(f, Fn):
            if params:
                raise StepTypeError(f"{kind} '{node}': parameters {sorted(params)} given beside {f}; "
                                    f"put them inside fn(...)")
            return f
        if not isinstance(f, str):
            raise StepTypeError(f"{kind} '{node}': a function must be a name or fn(...), got {f!r}")
        try:
            return make_fn(f, **(params or {}))
        except StepTypeError as exc:
            raise StepTypeError(f"{kind} '{node}': {exc}") from None

    # ------------------------------------------------------------------ queries
    def edges(self):
        """``(producer StreamRef, consumer node name, consumer port)`` for every connected stream."""
        for node in self.nodes.values():
            for port, ref in node.inputs.items():
                if ref is not None:
                    yield ref, node.name, port

    def stored_tensors(self) -> list[str]:
        """Names of the off-chip tensors some store writes (the graph's outputs), sorted."""
        return sorted({n.p("tensor") for n in self.nodes.values() if n.memory == "store"})

    def input_tensors(self) -> list[str]:
        """Names of the off-chip tensors some load reads and no store writes (the graph's inputs), in
        declaration order."""
        loaded = {n.p("tensor") for n in self.nodes.values() if n.memory == "load"}
        stored = set(self.stored_tensors())
        return [t for t in self.tensors if t in loaded and t not in stored]

    def validate(self) -> "Graph":
        """Check the whole graph; raise a :class:`StepGraphError` naming the first problem."""
        for node in self.nodes.values():
            for port, ref in node.inputs.items():
                if ref is None and (port not in node.optional_inputs or node.kind == "Feedback"):
                    raise StepGraphError(f"{node.kind} '{node.name}' port '{port}': dangling input "
                                         f"(never connected" + (", bind() it" if node.kind == "Feedback" else "") + ")")
            for ref in node.outputs:
                if (node.name, ref.port) not in self.consumers:
                    raise StepGraphError(f"{node.kind} '{node.name}' output '{ref.port}' ({ref.type}) has no "
                                         f"consumer; connect it or end it with output()")
        for cycle in self._cycles():
            if not any(self.nodes[n].breaks_cycles for n in cycle):
                names = " -> ".join(f"{self.nodes[n].kind} '{n}'" for n in cycle)
                raise StepGraphError(f"cycle with no EagerMerge or Bufferize on it: {names}")
        return self

    def _succ(self) -> dict[str, list[str]]:
        succ = {n: [] for n in self.nodes}
        for ref, consumer, _ in self.edges():
            succ[ref.node.name].append(consumer)
        return succ

    def _cycles(self) -> list[list[str]]:
        """The strongly connected components with a cycle, each in graph order."""
        return cycles(self._succ())

    def cyclic_nodes(self) -> frozenset:
        """Names of the nodes on a cycle (closed with :meth:`feedback` and :meth:`bind`): the strongly
        connected components of more than one node."""
        return frozenset(n for comp in cycles(self._succ()) if len(comp) > 1 for n in comp)

    def topological_order(self) -> list[Op]:
        """Nodes in dependency order; edges out of a Feedback (cycle back edges) are ignored."""
        indeg = {n: 0 for n in self.nodes}
        succ = {n: [] for n in self.nodes}
        for ref, consumer, _ in self.edges():
            if ref.node.kind == "Feedback":
                continue
            succ[ref.node.name].append(consumer)
            indeg[consumer] += 1
        ready = [n for n in self.nodes if indeg[n] == 0]
        order = []
        while ready:
            n = ready.pop(0)
            order.append(self.nodes[n])
            for m in succ[n]:
                indeg[m] -= 1
                if indeg[m] == 0:
                    ready.append(m)
        if len(order) != len(self.nodes):
            stuck = [n for n in self.nodes if indeg[n] > 0]
            raise StepGraphError(f"cycle not closed through feedback(): {stuck}")
        return order

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> dict:
        return {
            "name": self.name,
            "tensors": {k: v.to_json() for k, v in self.tensors.items()},
            "nodes": [
                {"op": n.kind, "name": n.name,
                 "inputs": {p: r.label for p, r in n.inputs.items() if r is not None},
                 "params": {k: v for k, v in n.params_json().items() if v is not None}}
                for n in self.nodes.values()],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1)

    @classmethod
    def from_json(cls, obj) -> "Graph":
        """Rebuild a graph from :meth:`to_json` output (every check runs again)."""
        if isinstance(obj, (str, bytes)):
            try:
                obj = json.loads(obj)
            except json.JSONDecodeError as exc:
                raise StepGraphError(f"graph JSON is not valid JSON: {exc}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("nodes"), list):
            raise StepGraphError("graph JSON must be an object with a list under 'nodes'")
        g = cls(str(obj.get("name", "step")))
        tensors = obj.get("tensors", {})
        if not isinstance(tensors, dict):
            raise StepGraphError("graph JSON 'tensors' must be an object of name -> {rows, cols, dtype}")
        for tname, spec in tensors.items():
            missing = [k for k in ("rows", "cols", "dtype") if not isinstance(spec, dict) or k not in spec]
            if missing:
                raise StepGraphError(f"off-chip tensor {tname!r}: missing {missing}")
            g.tensor(tname, spec["rows"], spec["cols"], spec["dtype"])
        pending_bind = []
        for i, entry in enumerate(obj["nodes"]):
            if not isinstance(entry, dict) or not isinstance(entry.get("op"), str) \
                    or not isinstance(entry.get("name"), str):
                raise StepGraphError(f"graph JSON node #{i} must be an object with string 'op' and 'name'")
            kind, name = entry["op"], entry["name"]
            if kind not in OPS:
                raise StepGraphError(f"node {name!r}: unknown operator {kind!r}")
            params = OPS[kind].params_from_json(entry.get("params", {}), name)
            inputs = {}
            for port, label in (entry.get("inputs") or {}).items():
                src, dot, sport = str(label).rpartition(".")
                if not dot or not src:
                    raise StepGraphError(f"{kind} '{name}' port '{port}': input {label!r} must be 'node.port'")
                if kind == "Feedback":
                    pending_bind.append((name, src, sport))
                    continue
                if src not in g.nodes:
                    raise StepGraphError(f"{kind} '{name}' port '{port}': dangling input {label!r} "
                                         f"(no node {src!r} before it)")
                inputs[port] = g.nodes[src][sport]
            g.add(kind, name, inputs, **params)
        for name, src, sport in pending_bind:
            if src not in g.nodes:
                raise StepGraphError(f"Feedback '{name}' port 'in': dangling input {src}.{sport}")
            g.bind(g.nodes[name].out, g.nodes[src][sport])
        return g

    # ------------------------------------------------------------------ DOT
    def to_dot(self) -> str:
        """Graphviz DOT: one box per node, each edge labelled with stream shape and element type."""
        lines = [f'digraph "{self.name}" {{', "  rankdir=TB;", '  node [shape=box, fontname="Helvetica"];',
                 '  edge [fontname="Helvetica", fontsize=10];']
        for n in self.nodes.values():
            extra = ""
            if "fn" in n.params:
                extra = f"\\n{n.params['fn']}"
            elif "tensor" in n.params:
                extra = f"\\n{n.params['tensor']}"
            elif "update" in n.params:
                extra = f"\\n{n.params['update']}"
            lines.append(f'  "{n.name}" [label="{n.kind}\\n{n.name}{extra}"];')
        for ref, consumer, port in self.edges():
            st = ref.type
            lines.append(f'  "{ref.node.name}" -> "{consumer}" [label="{st.shape_str()}\\n{st.dtype}"];')
        lines.append("}")
        return "\n".join(lines) + "\n"

    def __repr__(self):
        return f"<Graph {self.name!r}: {len(self.nodes)} nodes>"
