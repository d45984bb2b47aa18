"""The pipeline cycles of the units the lowering makes of each node: what the approximate model adds to an edge.

A node of the user's graph becomes a chain of units (:mod:`step_hdl.mapper.fusion`); a token spends each
unit's declared latency (``StepUnit.latency_of``) and a FIFO cycle into each unit after the first on its way
through. ``tests/hw/test_latency.py`` measures it in RTL.
"""

from __future__ import annotations

from step_hdl.graph import Graph

from .adapters import adapter_for
from .fusion import units


def unit_latency(graph: Graph, head: str, kind: str, pipeline: bool = False) -> int:
    """The declared pipeline latency (``StepUnit.latency_of``) of the unit that node ``head`` of ``graph``
    heads (``kind``: its :func:`units` kind) on a fabric with or without ``pipeline``; 0 for a node no unit
    class runs."""
    node = graph.nodes[head]
    adapter = adapter_for(node, kind)
    if adapter is None or not adapter.units:
        return 0
    cls = adapter.units.get(adapter.unit_name(node))
    return cls.latency_of(node, pipeline) if cls is not None else 0


def chain_latency(lowered: Graph, pipeline: bool = False) -> dict[str, int]:
    """Per node of the graph ``lowered`` was lowered from (``lowered.origin``, set by
    :func:`~step_hdl.mapper.tiling.tile_physical`): the cycles a token spends in the pipeline of the units
    the lowering made of it beyond one, on the slowest path through them: a FIFO (a cycle) into each unit
    after the first and every unit's declared latency (:func:`unit_latency`). A node that is one unit of
    latency 0 (a Reshape) spends none; one Map, 1; the approximate model counts these cycles."""
    origin = getattr(lowered, "origin", {})
    heads, weight = {}, {}
    for head, (kind, nodes) in units(lowered).items():
        weight[head] = unit_latency(lowered, head, kind, pipeline)
        for n in nodes:
            heads[n] = head
    succ: dict = {}
    for ref, consumer, _ in lowered.edges():
        a, b = heads.get(ref.node.name), heads.get(consumer)
        if a is not None and b is not None and a != b and origin.get(a) == origin.get(b) is not None:
            succ.setdefault(a, set()).add(b)
    depth: dict = {}

    def longest(h):             # cycles on the slowest path from unit h inside its node (a DAG: memoized)
        if h not in depth:
            depth[h] = weight[h] + max((1 + longest(s) for s in succ.get(h, ())), default=0)
        return depth[h]
    for h in set(heads.values()):
        longest(h)
    out: dict = {}
    for h, d in depth.items():
        o = origin.get(h)
        if o is not None:
            out[o] = max(out.get(o, 0), d)
    return out
