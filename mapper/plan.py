"""Planning: a lowered, bound graph to the :class:`~step_hdl.mapper.design.Design` and
:class:`~step_hdl.mapper.design.Program` that run it.

:func:`plan` makes one unit per node, or per chain of nodes that one unit runs
(:mod:`step_hdl.mapper.fusion`), through the first node's adapter
(:mod:`step_hdl.mapper.adapters`), one FIFO per edge between units (depths
from :mod:`step_hdl.mapper.fifo`) and the sinks of Output nodes; :func:`configure`
lays out the off-chip tensors and collects every unit's configuration writes.
"""

from __future__ import annotations

from step_hdl.graph import Graph
from step_hdl.types import Index, Tile, dtype as make_dtype
from step_hdl.units.base import hw_port, not_elaborated
from step_hdl.units.params import ParamError
from step_hdl.units.pool import TilePoolParams

from .adapters import ConfigContext, adapter_for, adapter_of_unit, mapped_kinds
from .design import Design, EdgeSpec, PoolSpec, Program, SinkSpec, UnitSpec, built_units, make_unit, \
    pack_config, tile_bytes
from .fabric import Fabric, FabricError, static_size
from .fifo import UNBOUNDED, capped_edges, edge_fifos
from .fusion import unit_label, units as fused_units
from .pools import check_pool, pool_pages, tile_pools

def _check_not_unit(node):
    """The nodes that head no unit of their own: a buffer read (inside its Bufferize's OnChipBuffer, never
    first) and the top level's sinks, checked for what the top level takes."""
    if node.kind == "Streamify":
        src = node.inputs["in"].node
        if src.kind != "Bufferize":
            raise FabricError(f"Streamify '{node.name}': the on-chip buffer unit needs its input straight "
                              f"from a Bufferize (got {src.kind} '{src.name}')")
    elif node.kind == "Output":
        t = node.t("in").dtype
        if isinstance(t, Tile) and t != Index():
            raise FabricError(f"Output '{node.name}': streams of data tiles leaving the fabric are not "
                              f"supported by the top level (Outputs are sinks for selectors, indices and "
                              f"acknowledgements); store results with a LinearOffChipStore")


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
        _check_not_unit(node)
    pools = tile_pools(graph) if fabric.pools else []
    notes = [n for n in (check_pool(p, fabric, bindings) for p in pools) if n]
    pool_of = {b: p for p in pools for b in p.buffers}
    for head, (kind, nodes) in fused_units(graph).items():
        node = graph.nodes[head]
        adapter = adapter_for(node, kind)
        if adapter is None:
            raise FabricError(f"{node.kind} '{node.name}': the top-level generator has no hardware unit for "
                              f"this operator yet (it has {', '.join(mapped_kinds())}, Streamify)")
        try:
            params = adapter.params(node, graph, fabric, bindings, pool=pool_of.get(head))
        except ParamError as exc:
            raise FabricError(f"{node.kind} '{node.name}': no unit can run it on this fabric: {exc}") from None
        u = UnitSpec(unit_label(kind, nodes), adapter.unit_name(node), params, nodes)
        units.append(u)
        for n in u.nodes:
            node_unit[n] = u
    fifos = edge_fifos(graph, fabric.fifo_depth, fabric.max_fifo_depth, bindings, fabric.chunk_fifo_depth)
    edges, sinks = [], []
    made = {u.name: make_unit(u) for u in units}
    for ref, consumer, port in graph.edges():
        cnode = graph.nodes[consumer]
        if cnode.kind == "Feedback":
            continue        # the cycle's edge is made from its consumer's side
        while ref.node.kind == "Feedback":
            ref = ref.node.inputs["in"]
        src_u = node_unit[ref.node.name]
        if cnode.kind == "Output":
            sinks.append(SinkSpec(cnode.name, src_u.name, hw_port(ref.port, True)))
            continue
        dst_u = node_unit[consumer]
        if dst_u is src_u and consumer in dst_u.nodes[1:]:
            continue        # inside a unit (a buffer's handle, a fused chain's own stream)
        dport = "i_ref" if cnode.kind == "Streamify" and port == "ref" else hw_port(port, False)
        sport = hw_port(ref.port, True)
        sfmt, dfmt = _port_fmt(made[src_u.name], sport), _port_fmt(made[dst_u.name], dport)
        if sfmt.layout != dfmt.layout:
            raise FabricError(f"edge {ref.label} -> {consumer}.{port}: the producer's token layout "
                              f"({sfmt.payload}, max_rank {sfmt.max_rank}) differs from the consumer's "
                              f"({dfmt.payload}, max_rank {dfmt.max_rank})")
        d, safe = fifos[ref.label]
        if safe > d:
            notes.append(f"edge {ref.label}: FIFO depth {d} below the safe bound "
                         f"{'unbounded' if safe >= UNBOUNDED else safe} "
                         f"(reconvergent fan-out; fine when the paths are balanced)")
        edges.append(EdgeSpec(ref.label, src_u.name, sport, dst_u.name, dport, d, sfmt.width))
    for made_unit in made.values():
        not_elaborated(made_unit)
    design = Design(name, fabric, tuple(units), tuple(edges), watchdog=fabric.watchdog, sinks=tuple(sinks),
                    pools=tuple(_pool_spec(p, fabric, made, node_unit) for p in pools))
    built_units(design, made)
    program = configure(design, graph, bindings, tensor_order, sources)
    program.notes = notes
    program.capped = capped_edges(fifos)
    program.pools = [p.report(pool_pages(p, fabric), _entry_bytes(made[node_unit[p.buffers[0]].name]), bindings)
                     for p in pools]
    return design, program


def _entry_bytes(buffer_unit) -> int:
    p = buffer_unit.params
    return p.rows * p.cols * p.dt.bits // 8


def _pool_spec(pool, fabric, made, node_unit) -> PoolSpec:
    clients = tuple(node_unit[b].name for b in pool.buffers)
    fmt = made[clients[0]].fmt("i")
    params = TilePoolParams(width=fmt.payload_width + fmt.stop_bits, pages=pool_pages(pool, fabric),
                            page_entries=pool.page_entries, clients=len(clients))
    return PoolSpec(pool.name, params, clients)


def _port_fmt(unit, port):
    if port not in unit.fmts:
        raise FabricError(f"unit {type(unit).__name__} has no port {port!r} (ports: {sorted(unit.fmts)})")
    return unit.fmts[port][1]


def memory_word(graph: Graph, tiles: dict) -> int:
    """Bytes of the memory word: the largest physical tile an off-chip unit of ``graph`` (lowered) moves, so
    every unit's port (one physical tile of its tensor's type) divides it; ``tiles`` from
    :func:`tensor_tiles`. :func:`configure` takes the same from the built units' ports."""
    return max((pr * pc * graph.tensors[name].dtype.bytes for name, (pr, pc) in tiles.items()), default=0)


def tensor_layout(graph: Graph, tiles: dict, word: int, tile: int, bindings=None, tensor_order=None) -> dict:
    """The off-chip layout: tensor name -> ``(byte address, rows, cols, dtype name)``.

    Tensors follow one another in ``tensor_order`` (default: the graph's), each starting on a ``word``
    boundary, each stored physical tile after physical tile (``tiles``: from :func:`tensor_tiles`; ``tile x
    tile`` for a tensor no unit touches), row by row of the tensor. The approximate model places its
    transfers at these addresses too (``sim.model.memory``), so both see the same DRAM channels."""
    tensors, addr = {}, 0
    for tname in list(tensor_order or graph.tensors):
        spec = graph.tensors[tname]
        rows, cols = (static_size(d, bindings, f"tensor {tname!r} size") for d in (spec.rows, spec.cols))
        pr, pc = tiles.setdefault(tname, (tile, tile))
        if rows % pr or cols % pc:
            raise FabricError(f"tensor {tname!r} [{rows}, {cols}] is not a whole number of "
                              f"{pr}x{pc} physical tiles")
        tb = pr * pc * make_dtype(spec.dtype.name).bytes
        if word % tb:
            raise FabricError(f"tensor {tname!r}: its {pr}x{pc} tiles ({tb} bytes) do not divide the "
                              f"{word}-byte memory word")
        tensors[tname] = (addr, rows, cols, spec.dtype.name)
        addr += -(-(rows // pr) * (cols // pc) * tb // word) * word
    return tensors


def offchip_layout(graph: Graph, tile: int, bindings=None) -> dict | None:
    """Tensor name -> byte address of ``graph``'s (lowered) tensors, as :func:`configure` lays them out
    (:func:`tensor_layout` with the memory word of :func:`memory_word`), or None when no off-chip unit
    touches one; a :class:`FabricError` for a tensor that cannot be laid out."""
    tiles = tensor_tiles(graph)
    word = memory_word(graph, tiles)
    if not word:
        return None
    return {name: addr for name, (addr, *_) in tensor_layout(graph, tiles, word, tile, bindings).items()}


def tensor_tiles(graph: Graph) -> dict:
    """name -> physical tile (rows, cols) of every tensor, from the loads and stores that touch it."""
    tiles: dict = {}
    for node in graph.nodes.values():
        if node.memory is None:
            continue
        t = tuple(int(d) for d in node.p("tile"))
        name = node.p("tensor")
        if tiles.setdefault(name, t) != t:
            raise FabricError(f"{node.kind} '{node.name}': tensor {name!r} is accessed in {list(t)} tiles here and "
                              f"in {list(tiles[name])} tiles elsewhere; one off-chip layout needs one tile shape")
    return tiles


def configure(design: Design, graph: Graph, bindings=None, tensor_order=None,
              sources: dict | None = None) -> Program:
    """The :class:`Program` (configuration image, memory layout) of ``graph`` on ``design``."""
    fab = design.fabric
    made = built_units(design)
    tiles = tensor_tiles(graph)
    word = max([made[n].params.port.word_bytes for n in design.mem_units] or [tile_bytes(fab)])
    tensors = tensor_layout(graph, tiles, word, fab.tile, bindings, tensor_order)
    ctx = ConfigContext(tensors, bindings, sources)
    config = []
    for k, u in enumerate(design.units):
        unit = made[u.name]
        node = graph.nodes[u.nodes[0]]
        try:
            words = adapter_of_unit(u.cls).configure(unit, node, graph, ctx)
        except ParamError as exc:
            raise FabricError(f"{node.kind} '{node.name}': its unit cannot be configured for it on this fabric: "
                              f"{exc}") from None
        if "start" in unit.regs.index:
            start = unit.regs.index["start"]
            words = [w for w in words if w & 0xFF != start]     # the top's start pulse writes it
        config += [pack_config(k, w) for w in words]
    return Program(design, config, tensors, dict(bindings or {}), tiles=tiles, word_bytes=word)
