"""One adapter per unit kind: how a lowered graph's node becomes a hardware unit.

An :class:`Adapter` knows, for the node kinds its unit runs, the unit's
structural parameters on a fabric (:meth:`Adapter.params`) and the unit's
configuration image for a node (:meth:`Adapter.configure`); which nodes one
unit runs (a buffer with its Streamify and fused Flatten, a MatMul chain) is
:mod:`step_hdl.mapper.fusion`'s rule. :func:`adapter_for` finds the adapter of
a unit's first node; :func:`unit_class` a unit class by the name a
:class:`~step_hdl.mapper.design.UnitSpec` records. Nothing else in the mapper
dispatches on a node kind or a unit class name.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from step_hdl.ops import OPS
from step_hdl.types import Selector, Tile
from step_hdl.units import compute, matmul, offchip, onchip, routing, shape, source
from step_hdl.units.functions import HW_FUNCTIONS
from step_hdl.units.params import StreamParams

from .fabric import FabricError
from .sizing import buffer_entries, buffer_tile_bytes
from .fusion import buffer_flatten, matmul_chain
from .pools import pool_pages


@dataclass
class ConfigContext:
    """What a program's configuration needs beyond the node: tensor addresses, bindings of the dynamic
    sizes, and the selector masks of every SelectorSource (from the reference run)."""

    tensors: dict
    bindings: dict | None = None
    sources: dict | None = None


def _tile(st, where) -> Tile:
    t = st.dtype
    if not isinstance(t, Tile):
        raise FabricError(f"{where}: streams of {t} have no hardware unit in the top-level generator yet "
                          f"(tiles only)")
    return Tile(t.dtype, int(t.rows), int(t.cols))


def _in_types(node) -> dict:
    return {p: r.type for p, r in node.inputs.items() if r is not None}


def _ref_params(ref, where) -> dict:
    """A unit's ``ref`` input (the row stream a load or buffer re-reads by): its tile."""
    if ref is None:
        return {}
    rt = _tile(ref.type, where)
    return dict(ref=True, ref_rows=int(rt.rows), ref_cols=int(rt.cols), ref_dtype=rt.dtype.name)


class Adapter:
    """Base adapter: a unit named like the node kind, configured with the node's parameters."""

    #: the unit family it maps: the operators whose ``unit`` trait names it (``step_hdl.ops``); None: an adapter
    #: :func:`adapter_for` picks by the node's function or fused chain
    family: str | None = None
    #: the unit classes it builds, by the name a UnitSpec records
    units: dict = {}

    def unit_name(self, node) -> str:
        return node.kind

    def params(self, node, graph, fab, bindings=None, pool=None):
        """The unit's structural parameters for ``node`` on ``fab``; ``pool``: the
        :class:`~step_hdl.mapper.pools.PoolPlan` whose pages hold the node's buffer (on-chip buffers only)."""
        raise NotImplementedError

    def configure(self, unit, node, graph, ctx: ConfigContext) -> list[int]:
        return unit.configure(dict(node.params), _in_types(node))


class LoadAdapter(Adapter):
    family = "load"
    units = {"LinearOffChipLoad": offchip.LinearOffChipLoad}

    def params(self, node, graph, fab, bindings=None, pool=None):
        t = _tile(node.out_types["out"], f"LinearOffChipLoad '{node.name}'")
        kw = _offchip_common(fab, bursts=True)
        kw.update(_ref_params(node.inputs.get("ref"), f"LinearOffChipLoad '{node.name}' port 'ref'"))
        if fab.pipeline:
            kw["pipeline"] = True
        return offchip.LinearLoadParams(int(t.rows), int(t.cols), t.dtype.name, max_dims=fab.max_rank + 1, **kw)

    def configure(self, unit, node, graph, ctx):
        return unit.configure(dict(node.params), _in_types(node), tensor_addr=ctx.tensors[node.p("tensor")][0],
                              bindings=ctx.bindings)


class OffChipAdapter(LoadAdapter):
    """Stores and random loads: the physical tile of the port whose tiles they move."""

    family = "offchip"
    units = {"LinearOffChipStore": offchip.LinearOffChipStore, "RandomOffChipLoad": offchip.RandomOffChipLoad,
             "RandomOffChipStore": offchip.RandomOffChipStore}
    def params(self, node, graph, fab, bindings=None, pool=None):
        # the port whose tiles it moves: a load's output, a random store's data, a linear store's input
        port = "out" if node.memory == "load" else "data" if node.addressed else "in"
        t = _tile(node.out_types[port] if port == "out" else node.t(port), f"{node.kind} '{node.name}'")
        return offchip.OffChipParams(int(t.rows), int(t.cols), t.dtype.name,
                                     **_offchip_common(fab, bursts=not node.addressed))


def _offchip_common(fab, bursts: bool) -> dict:
    """The memory port's parameters on ``fab``; ``bursts``: a linear unit, whose consecutive tiles go in bursts of
    the fabric's ``burst_bytes`` (random ones move a tile per address)."""
    tag_bits = max(1, (fab.mem_inflight - 1).bit_length())
    return dict(max_rank=fab.max_rank, addr_bits=32, tag_bits=tag_bits, max_inflight=fab.mem_inflight,
                burst_bytes=fab.burst_bytes if bursts else 0)


class BufferAdapter(Adapter):
    """A Bufferize and the Streamify that reads it: one on-chip buffer."""

    family = "buffer"
    units = {"OnChipBuffer": onchip.OnChipBuffer}

    def unit_name(self, node):
        return "OnChipBuffer"

    @staticmethod
    def streamify(node, graph):
        users = [(c, p) for ref, c, p in graph.edges() if ref.node is node]
        if len(users) != 1 or graph.nodes[users[0][0]].kind != "Streamify":
            raise FabricError(f"Bufferize '{node.name}': the on-chip buffer unit needs the buffer stream to feed "
                              f"exactly one Streamify (found {[c for c, _ in users]})")
        return graph.nodes[users[0][0]]

    def params(self, node, graph, fab, bindings=None, pool=None):
        sf = self.streamify(node, graph)
        t = _tile(node.t("in"), f"Bufferize '{node.name}'")
        shape_, tr = sf.params.get("read_shape"), bool(sf.params.get("transpose"))
        pooled = {} if pool is None else dict(pool_pages=pool_pages(pool, fab), page_entries=pool.page_entries)
        p = onchip.OnChipBufferParams(int(t.rows), int(t.cols), t.dtype.name, fab.max_rank,
                                      sram_bytes=fab.sram_bytes, read_dims=2 if tr else len(shape_ or ()),
                                      transpose=tr, **pooled, **({"out_reg": True} if fab.pipeline else {}),
                                      **_ref_params(sf.inputs.get("ref"), f"Streamify '{sf.name}' port 'ref'"))
        if pool is not None:
            return p        # the pool's pages hold it (mapper.pools.check_pool: this program's need fits)
        # a block that does not fit a bank would be cut short (the unit's overflow flag): an error here
        need = buffer_entries(node, graph, bindings)
        if need > p.bank_depth:
            raise FabricError(f"Bufferize '{node.name}': holds {need} entries of {t} ({buffer_tile_bytes(node)} "
                              f"bytes each); the fabric's on-chip buffers hold {p.bank_depth} per bank "
                              f"(sram_bytes {fab.sram_bytes}, two banks): raise sram_bytes to at least "
                              f"{2 * need * buffer_tile_bytes(node)}")
        return p

    def configure(self, unit, node, graph, ctx):
        sf = self.streamify(node, graph)
        flat = buffer_flatten(graph, sf)
        op = {"rank": node.p("rank"), "repeat": sf.params.get("repeat"), "read_shape": sf.params.get("read_shape"),
              "read_stride": sf.params.get("read_stride"), "transpose": sf.params.get("transpose"),
              "merge": flat.p("hi") if flat is not None else None}
        in_types = _in_types(node)
        if sf.inputs.get("ref") is not None:
            in_types["ref"] = sf.inputs["ref"].type
        return unit.configure(op, in_types, bindings=ctx.bindings)


class MapAdapter(Adapter):
    family = "map"
    units = {"Map": compute.Map}

    def params(self, node, graph, fab, bindings=None, pool=None):
        f = node.p("fn")
        where = f"Map '{node.name}'"
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
        if f.name in ("requantize", "convert") or (f.name in ("matmul", "row_sum", "col_sum") and f.param("dtype")):
            kw["out_dtype"] = out.dtype.name
        if f.name == "matmul":
            kw["matmul_transpose_a"] = bool(f.param("transpose_a"))   # the outer product of two rows is structural
            if f.param("groups"):
                kw["matmul_groups"] = True                            # a float matmul's group sums
            elif fab.matmul_rows and not f.param("transpose_a"):
                kw["matmul_rows"] = fab.matmul_rows
        if fab.pipeline:
            kw["pipeline"] = True
        return compute.MapParams(int(a.rows), int(a.cols), a.dtype.name, fab.max_rank, fns=(f.name,), **kw)

    def configure(self, unit, node, graph, ctx):
        return unit.configure({"fn": node.p("fn"), "n": node.p("n")}, _in_types(node))


class MatMulAdapter(MapAdapter):
    """``Map(matmul) -> Reshape(0, k) -> Accum(add, zeros, rank 1)``: one output-stationary MatMul unit."""

    family = None
    units = {"MatMul": matmul.MatMul}

    def unit_name(self, node):
        return "MatMul"

    def params(self, node, graph, fab, bindings=None, pool=None):
        p = super().params(node, graph, fab, bindings)
        return matmul.MatMulParams(**{f: getattr(p, f) for f in p.__dataclass_fields__})

    def configure(self, unit, node, graph, ctx):
        runs, _ = matmul_chain(graph, node)
        return unit.configure({"fn": node.p("fn"), "n": node.p("n"), "k": runs.p("chunk")}, _in_types(node))


class IndexFunctionAdapter(MapAdapter):
    """A Map of a selector/index function (``sel_index``, ``keep_if_zero``): a unit of its own."""

    FUNCTIONS = {"sel_index": "SelIndex", "keep_if_zero": "KeepIfZero"}
    family = None
    units = {"SelIndex": routing.SelIndex, "KeepIfZero": routing.KeepIfZero}

    def unit_name(self, node):
        return self.FUNCTIONS[node.p("fn").name]

    def params(self, node, graph, fab, bindings=None, pool=None):
        n = node.t("in0").dtype.n if node.p("fn").name == "sel_index" else 1
        return routing.SelIndexParams(n=n, max_rank=fab.max_rank)


class AccumAdapter(Adapter):
    """Accum and Scan: one state tile updated per element (Scan emits it after each; it keeps no positions)."""
    family = "accum"
    units = {"Accum": compute.Accum, "Scan": compute.Scan}

    def params(self, node, graph, fab, bindings=None, pool=None):
        t = _tile(node.t("in"), f"{node.kind} '{node.name}'")
        st = _tile(node.out_types["out"], f"{node.kind} '{node.name}'")
        positions = fab.accum_positions if node.params.get("keep") else 0
        # a fabric with ``pipeline`` registers the keep hardware's control (the plain Accum is fast enough)
        extra = {"positions": positions, **({"pipeline": True} if fab.pipeline else {})} if positions else {}
        return compute.AccumParams(int(t.rows), int(t.cols), t.dtype.name, fab.max_rank,
                                   updates=(node.p("update").name,), state_rows=int(st.rows),
                                   state_cols=int(st.cols), state_dtype=st.dtype.name, **extra)

    def configure(self, unit, node, graph, ctx):
        op = {k: node.params.get(k) for k in ("update", "init", "rank")}
        if node.params.get("keep"):
            op["keep"] = node.params["keep"]
        return unit.configure(op, _in_types(node))


class BroadcastAdapter(Adapter):
    family = "broadcast"
    units = {"Broadcast": routing.BroadcastUnit}

    def params(self, node, graph, fab, bindings=None, pool=None):
        t = node.t("in").dtype
        if isinstance(t, Selector):
            return routing.BroadcastParams(n=node.p("n"), max_rank=fab.max_rank, selector=t.n)
        t = _tile(node.t("in"), f"Broadcast '{node.name}'")
        return routing.BroadcastParams(n=node.p("n"), max_rank=fab.max_rank, rows=int(t.rows), cols=int(t.cols),
                                       dtype=t.dtype.name)


class RoutingAdapter(Adapter):
    family = "routing"
    units = {"Partition": routing.Partition, "Reassemble": routing.Reassemble, "EagerMerge": routing.EagerMerge}

    def params(self, node, graph, fab, bindings=None, pool=None):
        t = _tile(node.t("in0" if "in0" in node.inputs else "in"), f"{node.kind} '{node.name}'")
        return routing.RoutingParams(int(t.rows), int(t.cols), t.dtype.name, fab.max_rank, n=node.p("n"))


class ShapeAdapter(Adapter):
    family = "shape"
    units = {"Promote": shape.Promote, "Flatten": shape.Flatten, "RepeatStatic": shape.RepeatStatic,
             "Reshape": shape.Reshape}

    def params(self, node, graph, fab, bindings=None, pool=None):
        t = _tile(node.t("in"), f"{node.kind} '{node.name}'")
        cls = {"RepeatStatic": shape.RepeatParams, "Reshape": shape.ReshapeParams}.get(node.kind, StreamParams)
        kw = {"pad": node.p("pad") is not None} if node.kind == "Reshape" else {}
        return cls(int(t.rows), int(t.cols), t.dtype.name, fab.max_rank, **kw)


class SourceAdapter(Adapter):
    """SelectorSource and IndexSource: their values are configuration data."""

    family = "source"
    units = {"SelectorSource": source.SelectorSource, "IndexSource": source.IndexSource}

    def params(self, node, graph, fab, bindings=None, pool=None):
        length = sympy.sympify(node.out_types["out"].shape[0])
        if not length.is_Integer:
            raise FabricError(f"{node.kind} '{node.name}': its length {length} must be static (it sizes the "
                              f"unit's memory)")
        capacity = 1 << max(0, int(length) - 1).bit_length()
        if node.kind == "IndexSource":
            return source.IndexSourceParams(capacity=capacity, max_rank=fab.max_rank)
        return source.SourceParams(n=node.p("n"), capacity=capacity, max_rank=fab.max_rank)

    def configure(self, unit, node, graph, ctx):
        if node.kind == "IndexSource":
            values = node.p("values")
        elif node.name in (ctx.sources or {}):
            values = ctx.sources[node.name]
        else:
            raise FabricError(f"SelectorSource '{node.name}': no selector values for this program")
        return unit.configure(dict(node.params), _in_types(node), values=values)


class FlatMapAdapter(Adapter):
    family = "flat_map"
    units = {"FlatMap": compute.FlatMap}

    def params(self, node, graph, fab, bindings=None, pool=None):
        t = _tile(node.t("in"), f"FlatMap '{node.name}'")
        return compute.FlatMapParams(int(t.rows), int(t.cols), t.dtype.name, fab.max_rank, fn=node.p("fn").name)


ADAPTERS = (LoadAdapter(), OffChipAdapter(), BufferAdapter(), MapAdapter(), MatMulAdapter(), IndexFunctionAdapter(),
            AccumAdapter(), BroadcastAdapter(), RoutingAdapter(), ShapeAdapter(), SourceAdapter(), FlatMapAdapter())
_BY_FAMILY = {a.family: a for a in ADAPTERS if a.family}
_BY_UNIT = {name: a for a in ADAPTERS for name in a.units}


def mapped_kinds() -> list[str]:
    """Node kinds that have a hardware unit."""
    return sorted(kind for kind, op in OPS.items() if op.unit in _BY_FAMILY)


def adapter_for(node, unit_kind: str | None = None) -> Adapter | None:
    """The adapter of the unit that ``node`` heads (``unit_kind``: :func:`step_hdl.mapper.fusion.units`' kind
    of it; ``None`` if no unit runs its kind)."""
    if unit_kind == "MatMul":
        return _BY_UNIT["MatMul"]
    if node.kind == "Map" and node.p("fn").name in IndexFunctionAdapter.FUNCTIONS:
        return _BY_UNIT["SelIndex"]
    return _BY_FAMILY.get(node.unit)


def adapter_of_unit(name: str) -> Adapter:
    """The adapter of the unit class named ``name`` (a :class:`~step_hdl.mapper.design.UnitSpec`'s ``cls``)."""
    if name not in _BY_UNIT:
        raise FabricError(f"no unit class {name!r}")
    return _BY_UNIT[name]


def unit_class(name: str):
    """The :mod:`step_hdl.units` class a UnitSpec's ``cls`` names."""
    return adapter_of_unit(name).units[name]
