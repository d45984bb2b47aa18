"""FIFO depths per edge.

Most edges need only a small FIFO (the fabric's default depth). A *reconvergent
fan-out* is different: when the outputs of one node (a Broadcast, a Reshape
with its padding flags, a Partition, an EagerMerge with its selector) travel
different paths that meet again (the MoE routing selector feeds both the
Partition and the Reassemble of the same tokens), the short path must hold
every token the long path has not yet answered, or the fabric deadlocks. :func:`fifo_depths` finds
those edges and sizes them to hold their whole stream (elements plus one stop
per element plus done), a safe bound; where that size is dynamic the edge gets
``unbounded`` depth and a note, to be sized from a simulation.
"""

from __future__ import annotations

import sympy

from step_hdl.graph import Graph

UNBOUNDED = 1 << 30


def _reach(graph: Graph, start: str, succ) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        n = todo.pop()
        for m in succ.get(n, ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def fifo_depths(graph: Graph, default: int = 2, bindings: dict | None = None) -> dict[str, int]:
    """Depth of every edge (keyed ``producer.port``): ``default``, or more on reconvergent fan-outs."""
    succ: dict[str, list[str]] = {}
    for ref, consumer, _ in graph.edges():
        if graph.nodes[consumer].kind != "Feedback":
            # a cycle's paths are bounded by its credits (the EagerMerge that closes it), not by FIFOs
            succ.setdefault(ref.node.name, []).append(consumer)
    depths = {ref.label: default for ref, _, _ in graph.edges()}
    for node in graph.nodes.values():
        if len(node.out_types) < 2:
            continue
        reach = {}
        for ref in node.outputs:
            consumer = next(c for r, c, _ in graph.edges() if r.label == ref.label)
            reach[ref.label] = _reach(graph, consumer, succ) | {consumer}
        for label, mine in reach.items():
            others = set().union(*(r for l2, r in reach.items() if l2 != label))
            if mine & others:
                st = node.out_types[label.split(".")[1]]
                n = sympy.sympify(2 * st.elements + 1).subs(bindings or {})
                depths[label] = max(default, int(n)) if n.is_Integer else UNBOUNDED
    return depths
