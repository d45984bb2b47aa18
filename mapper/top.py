"""Top-level generation: one Amaranth component that runs a mapped program.

:func:`plan` turns a lowered, bound graph into a :class:`Design` (what is
built: one unit instance per node, the Bufferize/Streamify pairs on one
:class:`~step_hdl.units.memory.OnChipBuffer`, one FIFO per edge) and a
:class:`Program` (what is written into it: the configuration image and the
off-chip memory layout). A design depends only on structural parameters, so a
tile-size sweep whose lowered graphs have the same structure shares one
design (one Verilog build); :meth:`Design.key` hashes it.

Interface of :class:`FabricTop` (``docs/architecture.md`` has the table):

``cfg`` (in stream, always ready)
    ``addr`` = unit index << 8 | register, ``data`` 32 bits: the configuration
    image, written before ``start``.
``start`` (in, pulse)
    starts every ``LinearOffChipLoad`` (writes their ``start`` register) and the
    cycle counter.
``done`` (out)
    every store unit has written its last tile (latched until reset).
``hung`` (out)
    no token or memory transfer anywhere for ``watchdog`` cycles while running.
``mem0 .. mem{n-1}``
    one memory port per off-chip unit (request/response streams of
    :mod:`step_hdl.units.memport`), in :attr:`Design.mem_units` order.
``ctr_addr`` / ``ctr_data`` (counter read-back, combinational; only with ``counters=True``, the default)
    testbench instrumentation, left out for synthesis (``FabricTop(design, counters=False)``
    builds no counter registers and has no ``ctr_*`` ports): counter ``k`` of :meth:`Design.counter_names`: ``cycles`` (start to done),
    ``bytes_read``, ``bytes_written``, ``idle``, per unit ``<unit>.active``
    (cycles with a transfer on any of its ports) and ``<unit>.stalled`` (no
    transfer, an output blocked by a full FIFO), per edge ``<edge>.produced``
    and ``<edge>.consumed`` (tokens into and out of its FIFO; a difference is a
    token still held, which is how a deadlock report names stuck channels).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import sympy
from amaranth.hdl import Array, Cat, Const, Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from step_hdl.graph import Graph
from step_hdl.types import Index, Tile, dtype as make_dtype

from step_hdl.units.base import hw_port
from step_hdl.units.params import ParamError

from .fabric import Fabric, FabricError, static_size
from .fifo import UNBOUNDED, edge_depth, fifo_depths

#: top-level configuration port: 8 register address bits below the unit index
#: address bits of a top-level configuration write: 16 bits of unit index (a fabric of thousands of units)
#: above the 8 register bits
TOP_CFG_ADDR_BITS = 24
TOP_CFG_LAYOUT = data.StructLayout({"addr": unsigned(TOP_CFG_ADDR_BITS), "data": unsigned(32)})
COUNTER_BITS = 32
#: kinds that touch off-chip memory (one memory port each)
OFFCHIP = ("LinearOffChipLoad", "LinearOffChipStore", "RandomOffChipLoad", "RandomOffChipStore")
STORES = ("LinearOffChipStore",)


@dataclass(frozen=True)
class UnitSpec:
    """One unit instance: its class in :mod:`step_hdl.units`, structural parameters, and the nodes it runs."""

    name: str
    cls: str
    params: object
    nodes: tuple

    def to_json(self) -> dict:
        p = self.params.to_json() if hasattr(self.params, "to_json") else dict(self.params)
        return {"name": self.name, "cls": self.cls, "params": p, "nodes": list(self.nodes)}


@dataclass(frozen=True)
class EdgeSpec:
    """A FIFO of ``depth`` tokens from ``src``'s hardware port ``src_port`` to ``dst``'s ``dst_port``."""

    label: str
    src: str
    src_port: str
    dst: str
    dst_port: str
    depth: int
    width: int

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SinkSpec:
    """An Output node: ``src``'s port ``src_port`` is always ready; its done token counts towards ``done``."""

    name: str
    src: str
    src_port: str

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Design:
    """Everything structural about a mapped program's hardware (hashable, JSON)."""

    name: str
    fabric: Fabric
    units: tuple
    edges: tuple
    watchdog: int = 4096
    sinks: tuple = ()

    def to_json(self) -> dict:
        out = {"name": self.name, "fabric": self.fabric.to_json(), "units": [u.to_json() for u in self.units],
               "edges": [e.to_json() for e in self.edges], "watchdog": self.watchdog}
        if self.sinks:      # (only when present: the cache keys of sink-less designs stay as they were)
            out["sinks"] = [s.to_json() for s in self.sinks]
        return out

    def key(self) -> str:
        """Hash of the structural parameters (the Verilog cache key)."""
        text = json.dumps({**self.to_json(), "name": ""}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def mem_units(self) -> list[str]:
        return [u.name for u in self.units if u.cls in OFFCHIP]

    def counter_names(self) -> list[str]:
        names = ["cycles", "bytes_read", "bytes_written", "idle"]
        for u in self.units:
            names += [f"{u.name}.active", f"{u.name}.stalled"]
        for e in self.edges:
            names += [f"{e.label}.produced", f"{e.label}.consumed"]
        return names


@dataclass
class Program:
    """What one program writes into a :class:`Design`: configuration and memory layout.

    ``config``: packed top-level configuration writes (``addr | data << 24``);
    ``tensors``: name -> (byte address, rows, cols, dtype) in the off-chip image,
    tile by tile (:mod:`step_hdl.units.memport`) with the tensor's physical tile
    ``tiles[name]`` (``P x P``, or ``[1, P]`` rows / ``[1, 1]`` scalars for
    row-tiled tensors, several of which share one memory word); every tensor
    starts on a memory word (:attr:`word_bytes`, the widest port's tile).
    """

    design: Design
    config: list
    tensors: dict
    bindings: dict
    notes: list = field(default_factory=list)
    tiles: dict = field(default_factory=dict)
    word_bytes: int = 0


def tile_bytes(fabric: Fabric) -> int:
    return fabric.tile * fabric.tile * make_dtype(fabric.dtype).bytes


def pack_config(unit_index: int, word: int) -> int:
    """A unit's packed configuration write (``addr | data << 8``) as a top-level write
    (``addr | data << TOP_CFG_ADDR_BITS``)."""
    if not 0 <= unit_index < 1 << (TOP_CFG_ADDR_BITS - 8):
        raise FabricError(f"unit index {unit_index} does not fit the {TOP_CFG_ADDR_BITS - 8}-bit unit field of "
                          f"the configuration address")
    reg, value = word & 0xFF, word >> 8
    return (unit_index << 8 | reg) | (value << TOP_CFG_ADDR_BITS)


# ----------------------------------------------------------------------------- structural parameters per node

def _tile(st, where) -> Tile:
    t = st.dtype
    if not isinstance(t, Tile):
        raise FabricError(f"{where}: streams of {t} have no hardware unit in the top-level generator yet "
                          f"(tiles only)")
    return Tile(t.dtype, int(t.rows), int(t.cols))


def _offchip_common(fab: Fabric) -> dict:
    tag_bits = max(1, (fab.mem_inflight - 1).bit_length())
    return dict(max_rank=fab.max_rank, addr_bits=32, tag_bits=tag_bits, max_inflight=fab.mem_inflight)


def _spec_load(node, graph, fab):
    from step_hdl.units.memory import LinearLoadParams
    t = _tile(node.out_types["out"], f"LinearOffChipLoad '{node.name}'")
    kw = _offchip_common(fab)
    ref = node.inputs.get("ref")
    if ref is not None:
        rt = _tile(ref.type, f"LinearOffChipLoad '{node.name}' port 'ref'")
        kw.update(ref=True, ref_rows=int(rt.rows), ref_cols=int(rt.cols), ref_dtype=rt.dtype.name)
    return "LinearOffChipLoad", LinearLoadParams(int(t.rows), int(t.cols), t.dtype.name,
                                                 max_dims=fab.max_rank + 1, **kw)


#: the port whose tiles an off-chip unit moves (other than a linear load's ``out``)
_OFFCHIP_DATA_PORT = {"RandomOffChipLoad": "out", "RandomOffChipStore": "data", "LinearOffChipStore": "in"}


def _spec_store(node, graph, fab):
    from step_hdl.units.memory import OffChipParams
    port = _OFFCHIP_DATA_PORT[node.kind]
    t = _tile(node.out_types[port] if port == "out" else node.t(port), f"{node.kind} '{node.name}'")
    return node.kind, OffChipParams(int(t.rows), int(t.cols), t.dtype.name, **_offchip_common(fab))


def _spec_buffer(node, graph, fab):
    from step_hdl.units.memory import OnChipBufferParams
    sf = _streamify_of(node, graph)
    t = _tile(node.t("in"), f"Bufferize '{node.name}'")
    ref = sf.inputs.get("ref")
    kw = {}
    if ref is not None:
        rt = _tile(ref.type, f"Streamify '{sf.name}' port 'ref'")
        kw.update(ref=True, ref_rows=int(rt.rows), ref_cols=int(rt.cols), ref_dtype=rt.dtype.name)
    shape = sf.params.get("read_shape")
    return "OnChipBuffer", OnChipBufferParams(int(t.rows), int(t.cols), t.dtype.name, fab.max_rank,
                                              sram_bytes=fab.sram_bytes, read_dims=len(shape) if shape else 0, **kw)


#: functions on selectors and indices -> their unit class (units.routing)
INDEX_FUNCTIONS = {"sel_index": "SelIndex", "keep_if_zero": "KeepIfZero"}


def _spec_map(node, graph, fab):
    from step_hdl.units.compute import MapParams
    from step_hdl.units.functions import HW_FUNCTIONS
    f = node.p("fn")
    where = f"Map '{node.name}'"
    if f.name in INDEX_FUNCTIONS:        # selector <-> index conversions: units of their own
        from step_hdl.units.routing import SelIndexParams
        n = node.t("in0").dtype.n if f.name == "sel_index" else 1
        return INDEX_FUNCTIONS[f.name], SelIndexParams(n=n, max_rank=fab.max_rank)
    if f.name not in HW_FUNCTIONS:
        raise FabricError(f"{where}: function {f.name!r} has no hardware implementation (hardware functions: "
                          f"{', '.join(sorted(HW_FUNCTIONS))})")
    if f.name not in fab.map_functions:
        raise FabricError(f"{where} needs function {f.name!r}; the fabric's Map units support "
                          f"{', '.join(fab.map_functions)}")
    a = _tile(node.t("in0"), f"{where} port 'in0'")
    out = _tile(node.out_types["out"], f"{where} port 'out'")
    kw = {}
    if "in1" in node.inputs:
        b = _tile(node.t("in1"), f"{where} port 'in1'")
        kw.update(in1_rows=int(b.rows), in1_cols=int(b.cols), in1_dtype=b.dtype.name)
    if f.name == "requantize":
        kw["out_dtype"] = out.dtype.name
    if f.name == "matmul":
        kw["matmul_transpose_a"] = bool(f.param("transpose_a"))   # the outer product of two rows is structural
        if fab.matmul_rows and not f.param("transpose_a"):
            kw["matmul_rows"] = fab.matmul_rows
    return "Map", MapParams(int(a.rows), int(a.cols), a.dtype.name, fab.max_rank, fns=(f.name,), **kw)


def _spec_accum(node, graph, fab):
    from step_hdl.units.compute import AccumParams
    t = _tile(node.t("in"), f"{node.kind} '{node.name}'")
    st = _tile(node.out_types["out"], f"{node.kind} '{node.name}'")
    positions = fab.accum_positions if node.params.get("keep") else 0
    extra = {"positions": positions} if positions else {}
    return node.kind, AccumParams(int(t.rows), int(t.cols), t.dtype.name, fab.max_rank,
                                  updates=(node.p("update").name,), state_rows=int(st.rows),
                                  state_cols=int(st.cols), state_dtype=st.dtype.name, **extra)


def _spec_broadcast(node, graph, fab):
    from step_hdl.types import Selector
    if isinstance(node.t("in").dtype, Selector):
        return "Broadcast", {"selector": node.t("in").dtype.n, "max_rank": fab.max_rank, "n": node.p("n")}
    t = _tile(node.t("in"), f"Broadcast '{node.name}'")
    return "Broadcast", {"rows": int(t.rows), "cols": int(t.cols), "dtype": t.dtype.name,
                         "max_rank": fab.max_rank, "n": node.p("n")}


def _spec_routing(node, graph, fab):
    from step_hdl.units.routing import RoutingParams
    t = _tile(node.t("in0" if node.kind in ("Reassemble", "EagerMerge") else "in"), f"{node.kind} '{node.name}'")
    return node.kind, RoutingParams(int(t.rows), int(t.cols), t.dtype.name, fab.max_rank, n=node.p("n"))


def _spec_shape(node, graph, fab):
    from step_hdl.units.params import StreamParams
    from step_hdl.units.shape import RepeatParams, ReshapeParams
    t = _tile(node.t("in"), f"{node.kind} '{node.name}'")
    cls = {"RepeatStatic": RepeatParams, "Reshape": ReshapeParams}.get(node.kind, StreamParams)
    kw = {"pad": node.p("pad") is not None} if node.kind == "Reshape" else {}
    return node.kind, cls(int(t.rows), int(t.cols), t.dtype.name, fab.max_rank, **kw)


def _spec_source(node, graph, fab):
    from step_hdl.units.source import SourceParams
    length = sympy.sympify(node.out_types["out"].shape[0])
    if not length.is_Integer:
        raise FabricError(f"{node.kind} '{node.name}': its length {length} must be static (it sizes the "
                          f"unit's memory)")
    capacity = 1 << max(0, int(length) - 1).bit_length()
    if node.kind == "IndexSource":
        from step_hdl.units.source import IndexSourceParams
        return "IndexSource", IndexSourceParams(capacity=capacity, max_rank=fab.max_rank)
    return "SelectorSource", SourceParams(n=node.p("n"), capacity=capacity, max_rank=fab.max_rank)


def _spec_flatmap(node, graph, fab):
    from step_hdl.units.compute import FlatMapParams
    t = _tile(node.t("in"), f"FlatMap '{node.name}'")
    return "FlatMap", FlatMapParams(int(t.rows), int(t.cols), t.dtype.name, fab.max_rank, fn=node.p("fn").name)


SPECS = {"LinearOffChipLoad": _spec_load, "LinearOffChipStore": _spec_store, "Bufferize": _spec_buffer,
         "Map": _spec_map, "Accum": _spec_accum, "Broadcast": _spec_broadcast,
         "Partition": _spec_routing, "Reassemble": _spec_routing, "EagerMerge": _spec_routing,
         "Promote": _spec_shape, "Flatten": _spec_shape, "RepeatStatic": _spec_shape, "Reshape": _spec_shape,
         "SelectorSource": _spec_source, "IndexSource": _spec_source, "FlatMap": _spec_flatmap,
         "RandomOffChipLoad": _spec_store, "RandomOffChipStore": _spec_store}


def _streamify_of(node, graph):
    users = [(c, p) for ref, c, p in graph.edges() if ref.node is node]
    if len(users) != 1 or graph.nodes[users[0][0]].kind != "Streamify":
        raise FabricError(f"Bufferize '{node.name}': the on-chip buffer unit needs the buffer stream to feed "
                          f"exactly one Streamify (found {[c for c, _ in users]})")
    return graph.nodes[users[0][0]]


# ----------------------------------------------------------------------------- plan

def plan(graph: Graph, fabric: Fabric, name: str = "fabric", bindings: dict | None = None,
         tensor_order=None, sources: dict | None = None) -> tuple[Design, Program]:
    """The design and program of a graph lowered to ``fabric``'s physical tile.

    ``sources`` maps each SelectorSource node to its selector masks (ints) for this
    program (they go into the configuration image).

    Raises :class:`FabricError` naming the node for an operator or stream type
    the top-level generator has no unit for, and for a graph whose edge FIFOs
    cannot be bounded.
    """
    units, node_unit = [], {}
    for node in graph.topological_order():
        if node.kind == "Streamify":
            src = node.inputs["in"].node
            if src.kind != "Bufferize":
                raise FabricError(f"Streamify '{node.name}': the on-chip buffer unit needs its input straight "
                                  f"from a Bufferize (got {src.kind} '{src.name}')")
            continue
        if node.kind == "Output":
            t = node.t("in").dtype
            if isinstance(t, Tile) and t != Index():
                raise FabricError(f"Output '{node.name}': streams of data tiles leaving the fabric are not "
                                  f"supported by the top level (Outputs are sinks for selectors, indices and "
                                  f"acknowledgements); store results with a LinearOffChipStore")
            continue        # a sink port of the top level
        if node.kind == "Feedback":
            continue        # a wire closing a cycle
        spec = SPECS.get(node.kind)
        if spec is None:
            raise FabricError(f"{node.kind} '{node.name}': the top-level generator has no hardware unit for "
                              f"this operator yet (it has {', '.join(sorted(SPECS))}, Streamify)")
        try:
            cls, params = spec(node, graph, fabric)
        except ParamError as exc:
            raise FabricError(f"{node.kind} '{node.name}': no unit can run it on this fabric: {exc}") from None
        nodes = (node.name,) + ((_streamify_of(node, graph).name,) if node.kind == "Bufferize" else ())
        u = UnitSpec(node.name, cls, params, nodes)
        units.append(u)
        for n in nodes:
            node_unit[n] = u
    depths = fifo_depths(graph, fabric.fifo_depth, bindings)
    edges, sinks, notes = [], [], []
    made = {u.name: make_unit(u) for u in units}
    for ref, consumer, port in graph.edges():
        cnode = graph.nodes[consumer]
        if ref.node.kind == "Bufferize" or cnode.kind == "Feedback":
            continue        # inside the OnChipBuffer; the cycle's edge is made from its consumer's side
        while ref.node.kind == "Feedback":
            ref = ref.node.inputs["in"]
        src_u = node_unit[ref.node.name]
        if cnode.kind == "Output":
            sinks.append(SinkSpec(cnode.name, src_u.name, hw_port(ref.port, True)))
            continue
        dst_u = node_unit[consumer]
        if cnode.kind == "Streamify" and port == "ref":
            dport = "i_ref"
        else:
            dport = hw_port(port, False)
        sport = hw_port(ref.port, True)
        sfmt, dfmt = _port_fmt(made[src_u.name], sport), _port_fmt(made[dst_u.name], dport)
        if sfmt.layout != dfmt.layout:
            raise FabricError(f"edge {ref.label} -> {consumer}.{port}: the producer's token layout "
                              f"({sfmt.payload}, max_rank {sfmt.max_rank}) differs from the consumer's "
                              f"({dfmt.payload}, max_rank {dfmt.max_rank})")
        d = edge_depth(depths[ref.label], fabric.fifo_depth, fabric.max_fifo_depth)
        if depths[ref.label] > d:
            notes.append(f"edge {ref.label}: FIFO depth {d} below the safe bound "
                         f"{'unbounded' if depths[ref.label] >= UNBOUNDED else depths[ref.label]} "
                         f"(reconvergent fan-out; fine when the paths are balanced)")
        edges.append(EdgeSpec(ref.label, src_u.name, sport, dst_u.name, dport, d, sfmt.width))
    for made_unit in made.values():
        made_unit._MustUse__silence = True
    design = Design(name, fabric, tuple(units), tuple(edges), sinks=tuple(sinks))
    program = configure(design, graph, bindings, tensor_order, made, sources)
    program.notes = notes
    return design, program


def _port_fmt(unit, port):
    fmts = getattr(unit, "fmts", None)
    if fmts is None:        # Broadcast: one format on every port
        return unit.token_format
    if port not in fmts:
        raise FabricError(f"unit {type(unit).__name__} has no port {port!r} (ports: {sorted(fmts)})")
    return fmts[port][1]


def make_unit(spec: UnitSpec):
    """The Amaranth unit of a :class:`UnitSpec`."""
    from step_hdl.units import compute, memory, routing, shape, source, stream as ustream
    from step_hdl.units.layout import SelectorFormat, TokenFormat, tile_format
    if spec.cls == "Broadcast":
        p = spec.params
        payload = SelectorFormat(p["selector"]) if "selector" in p else tile_format(p["dtype"], p["rows"], p["cols"])
        fmt = TokenFormat(payload, p["max_rank"])
        b = ustream.Broadcast(fmt.layout, p["n"])
        b.token_format = fmt
        return b
    for mod in (memory, compute, routing, shape, source):
        cls = getattr(mod, spec.cls, None)
        if cls is not None:
            return cls(spec.params)
    raise FabricError(f"no unit class {spec.cls!r}")


def tensor_tiles(graph: Graph) -> dict:
    """name -> physical tile (rows, cols) of every tensor, from the loads and stores that touch it."""
    tiles: dict = {}
    for node in graph.nodes.values():
        if node.kind not in OFFCHIP:
            continue
        t = tuple(int(d) for d in node.p("tile"))
        name = node.p("tensor")
        if tiles.setdefault(name, t) != t:
            raise FabricError(f"{node.kind} '{node.name}': tensor {name!r} is accessed in {list(t)} tiles here and "
                              f"in {list(tiles[name])} tiles elsewhere; one off-chip layout needs one tile shape")
    return tiles


def configure(design: Design, graph: Graph, bindings=None, tensor_order=None, made=None,
              sources: dict | None = None) -> Program:
    """The :class:`Program` (configuration image, memory layout) of ``graph`` on ``design``."""
    fab = design.fabric
    made = made or {u.name: make_unit(u) for u in design.units}
    tiles = tensor_tiles(graph)
    word = max([made[n].params.port.word_bytes for n in design.mem_units] or [tile_bytes(fab)])
    tensors, addr = {}, 0
    order = list(tensor_order or graph.tensors)
    for tname in order:
        spec = graph.tensors[tname]
        rows, cols = (static_size(d, bindings, f"tensor {tname!r} size") for d in (spec.rows, spec.cols))
        pr, pc = tiles.setdefault(tname, (fab.tile, fab.tile))
        if rows % pr or cols % pc:
            raise FabricError(f"tensor {tname!r} [{rows}, {cols}] is not a whole number of "
                              f"{pr}x{pc} physical tiles")
        tb = pr * pc * make_dtype(spec.dtype.name).bytes
        if word % tb:
            raise FabricError(f"tensor {tname!r}: its {pr}x{pc} tiles ({tb} bytes) do not divide the "
                              f"{word}-byte memory word")
        tensors[tname] = (addr, rows, cols, spec.dtype.name)
        addr += -(-(rows // pr) * (cols // pc) * tb // word) * word
    config = []
    for k, u in enumerate(design.units):
        unit = made[u.name]
        node = graph.nodes[u.nodes[0]]
        in_types = {p: r.type for p, r in node.inputs.items() if r is not None}
        if u.cls == "Broadcast":
            continue
        if u.cls in OFFCHIP:
            words = unit.configure(dict(node.params), in_types, tensor_addr=tensors[node.p("tensor")][0],
                                   bindings=bindings)
        elif u.cls == "IndexSource":
            words = unit.configure(dict(node.params), in_types, values=node.p("values"))
        elif u.cls == "SelectorSource":
            if node.name not in (sources or {}):
                raise FabricError(f"SelectorSource '{node.name}': no selector values for this program")
            words = unit.configure(dict(node.params), in_types, values=sources[node.name])
        elif u.cls == "OnChipBuffer":
            sf = graph.nodes[u.nodes[1]]
            op = {"rank": node.p("rank"), "repeat": sf.params.get("repeat"),
                  "read_shape": sf.params.get("read_shape"), "read_stride": sf.params.get("read_stride")}
            if sf.inputs.get("ref") is not None:
                in_types["ref"] = sf.inputs["ref"].type
            words = unit.configure(op, in_types, bindings=bindings)
        elif u.cls in ("Map", *INDEX_FUNCTIONS.values()):
            words = unit.configure({"fn": node.p("fn"), "n": node.p("n")}, in_types)
        elif u.cls in ("Accum", "Scan"):
            op = {k2: node.params.get(k2) for k2 in ("update", "init", "rank")}
            if node.params.get("keep"):
                op["keep"] = node.params["keep"]
            words = unit.configure(op, in_types)
        else:
            words = unit.configure(dict(node.params), in_types)
        if "start" in unit.regs.index:
            start = unit.regs.index["start"]
            words = [w for w in words if w & 0xFF != start]     # the top's start pulse writes it
        config += [pack_config(k, w) for w in words]
    return Program(design, config, tensors, dict(bindings or {}), tiles=tiles, word_bytes=word)


# ----------------------------------------------------------------------------- the component

class FabricTop(wiring.Component):
    """The mapped program's hardware (synthesizable); see the module docstring for the interface."""

    def __init__(self, design: Design, counters: bool = True):
        from step_hdl.units.memport import MemPortSignature
        self.design = design
        self.counters = counters     # testbench instrumentation; False for synthesis (no ctr_* ports)
        self.unit_objs = {u.name: make_unit(u) for u in design.units}
        self.counter_names = design.counter_names() if counters else []
        members = {"cfg": In(stream.Signature(TOP_CFG_LAYOUT)), "start": In(1), "done": Out(1), "hung": Out(1)}
        if counters:
            members.update({"ctr_addr": In(16), "ctr_data": Out(COUNTER_BITS)})
        for k, name in enumerate(design.mem_units):
            members[f"mem{k}"] = Out(MemPortSignature(self.unit_objs[name].params.port))
        super().__init__(members)

    def elaborate(self, platform):
        from step_hdl.units.stream import Queue
        m = Module()
        d = self.design
        units = self.unit_objs
        for name, u in units.items():
            m.submodules[f"u_{name}"] = u

        running, done = Signal(), Signal()
        with m.If(self.start):
            m.d.sync += running.eq(1)
        m.d.comb += self.done.eq(done)

        # configuration: decode the unit index; the start pulse writes the loads' start register
        cfg = self.cfg
        m.d.comb += cfg.ready.eq(1)
        for k, spec in enumerate(d.units):
            u = units[spec.name]
            if "cfg" not in u.signature.members:
                continue
            sel = cfg.valid & (cfg.payload.addr[8:] == k)
            m.d.comb += [u.cfg.payload.addr.eq(cfg.payload.addr[:8]), u.cfg.payload.data.eq(cfg.payload.data),
                         u.cfg.valid.eq(sel)]
            if "start" in u.regs.index:
                with m.If(self.start):
                    m.d.comb += [u.cfg.valid.eq(1), u.cfg.payload.addr.eq(u.regs.index["start"]),
                                 u.cfg.payload.data.eq(1)]

        # edges: one FIFO each; transfers in and out are counted
        transfers, counters, finished = [], {}, []
        ports_of: dict[str, list] = {s.name: [] for s in d.units}    # (stream, is_output) per unit
        for e in d.edges:
            q = Queue(getattr(units[e.src], e.src_port).payload.shape(), e.depth)
            m.submodules[f"q_{e.label.replace('.', '__')}"] = q
            wiring.connect(m, getattr(units[e.src], e.src_port), q.i)
            wiring.connect(m, q.o, getattr(units[e.dst], e.dst_port))
            ports_of[e.src].append((q.i, True))
            ports_of[e.dst].append((q.o, False))
            fire_in, fire_out = q.i.valid & q.i.ready, q.o.valid & q.o.ready
            transfers += [fire_in, fire_out]
            counters[f"{e.label}.produced"] = fire_in
            counters[f"{e.label}.consumed"] = fire_out

        # memory ports, traffic
        rd_bytes, wr_bytes = [], []
        for k, name in enumerate(d.mem_units):
            u, port = units[name], getattr(self, f"mem{k}")
            wiring.connect(m, u.mem, wiring.flipped(port))
            req, resp = port.req, port.resp
            fire = req.valid & req.ready
            transfers += [fire, resp.valid & resp.ready]
            ports_of[name] += [(req, True), (resp, False)]
            rd_bytes.append((fire & ~req.payload.write, req.payload.bytes))
            wr_bytes.append((fire & req.payload.write, req.payload.bytes))

        # Output nodes: always ready; each one's done token is a finish condition like a store's
        for sk in d.sinks:
            port = getattr(units[sk.src], sk.src_port)
            fin = Signal(name=f"sink_{sk.name}_finished")
            m.d.comb += port.ready.eq(1)
            with m.If(port.valid & port.payload.done):
                m.d.sync += fin.eq(1)
            transfers.append(port.valid)
            finished.append(fin)
        stores = [units[s.name].finished for s in d.units if s.cls in STORES] + finished
        with m.If(running & Cat(*stores).all() if stores else Const(0)):
            m.d.sync += done.eq(1)
        live = running & ~done

        values = {}
        any_transfer = Signal()
        m.d.comb += any_transfer.eq(Cat(*transfers).any() if transfers else 0)
        idle = Signal(COUNTER_BITS, name="idle")
        with m.If(live):
            m.d.sync += idle.eq(idle + 1)
        with m.If(any_transfer | ~live):
            m.d.sync += idle.eq(0)
        m.d.comb += self.hung.eq(idle >= d.watchdog)
        values["idle"] = idle
        if not self.counters:
            return m

        def counter(name, inc):
            c = Signal(COUNTER_BITS, name="ctr_" + name.replace(".", "__"))
            with m.If(live):
                m.d.sync += c.eq(c + inc)
            values[name] = c

        counter("cycles", 1)
        counter("bytes_read", _sum_bytes(rd_bytes))
        counter("bytes_written", _sum_bytes(wr_bytes))
        for spec in d.units:
            ps = ports_of[spec.name]
            active = Cat(*[s.valid & s.ready for s, _ in ps]).any() if ps else Const(0)
            blocked = Cat(*[s.valid & ~s.ready for s, out in ps if out])
            counter(f"{spec.name}.active", active)
            counter(f"{spec.name}.stalled", ~active & (blocked.any() if len(blocked) else Const(0)))
        for name, fire in counters.items():
            counter(name, fire)
        table = Array([values[n] for n in self.counter_names])
        with m.If(self.ctr_addr < len(self.counter_names)):
            m.d.comb += self.ctr_data.eq(table[self.ctr_addr])
        return m


def _sum_bytes(terms):
    total = Const(0, COUNTER_BITS)
    for fire, nbytes in terms:
        total = total + (nbytes & fire.replicate(len(nbytes)))
    return total
