"""Which nodes of a lowered graph one hardware unit runs: the one rule for the fabric's unit counts, the binding
and the plan.

Most nodes are a unit each. Three chains are one unit:

* a Bufferize and the Streamify that reads it: an OnChipBuffer (the buffer handle never leaves the unit);
* that Streamify's Flatten(0, hi) of each reading, when the read is affine with static sizes >= 1 and
  ``hi`` below its dimensions: the buffer sends no close of the merged levels (``OnChipBuffer`` register
  ``merge``), so a matmul operand's re-read costs no cycle per ``k``-run;
* ``Map(matmul) -> Reshape(0, k) -> Accum(add, zeros, rank 1)``: a MatMul unit, which counts each output
  tile's ``k`` products itself (``units.matmul``); for float operands ``Map(matmul, groups) -> Reshape ->
  Accum(add_groups)``, its fp32 running sum of group sums.

The lowering (:mod:`step_hdl.mapper.tiling`) writes every matmul as those chains; a user's graph with the same
chains gets the same units.
"""

from __future__ import annotations

import sympy

from step_hdl.graph import Graph

def _only_consumer(graph: Graph, node, users=None):
    """The one node that takes ``node``'s only output, or None."""
    users = users if users is not None else _users(graph)
    got = users.get(node.name, [])
    return graph.nodes[got[0]] if len(got) == 1 and len(node.outputs) == 1 else None


def _users(graph: Graph) -> dict:
    out: dict = {}
    for ref, consumer, _ in graph.edges():
        out.setdefault(ref.node.name, []).append(consumer)
    return out


def buffer_flatten(graph: Graph, streamify, users=None):
    """The Flatten node fused into the buffer that ``streamify`` reads, or None (see the module docstring)."""
    nxt = _only_consumer(graph, streamify, users)
    shape = streamify.params.get("read_shape")
    if nxt is None or nxt.kind != "Flatten" or nxt.p("lo") != 0 or not shape or streamify.params.get("transpose"):
        return None
    if not all(sympy.sympify(d).is_Integer and int(d) >= 1 for d in shape) or not 1 <= nxt.p("hi") < len(shape):
        return None
    return nxt


def matmul_chain(graph: Graph, node, users=None):
    """``(reshape, accum)`` when ``node`` heads a ``Map(matmul) -> Reshape(0, k) -> Accum(add, zeros, rank 1)``
    chain (one MatMul unit), else None."""
    if node.kind != "Map" or node.p("fn").name != "matmul":
        return None
    users = users if users is not None else _users(graph)
    runs = _only_consumer(graph, node, users)
    if runs is None or runs.kind != "Reshape" or runs.p("rank") != 0 or runs.p("pad") is not None \
            or runs.params.get("partial"):
        return None
    acc = _only_consumer(graph, runs, users)
    update = "add_groups" if node.p("fn").param("groups") else "add"     # a float matmul's group sums
    if acc is None or acc.kind != "Accum" or acc.p("update").name != update or acc.p("init").name != "zeros" \
            or acc.p("rank") != 1 or acc.params.get("keep"):
        return None
    return runs, acc


def units(graph: Graph) -> dict:
    """``{head node name: (unit kind, node names)}`` for every unit of ``graph``, heads in topological order.
    The kind is the node's (``Bufferize`` for a buffer, with its Streamify and fused Flatten) or ``MatMul``."""
    users = _users(graph)
    out: dict = {}
    taken: set = set()
    for node in graph.topological_order():
        if node.wire or node.name in taken:
            continue
        kind, nodes = node.kind, [node.name]
        if node.kind == "Bufferize":
            sf = _only_consumer(graph, node, users)
            if sf is not None and sf.kind == "Streamify":
                nodes.append(sf.name)
                flat = buffer_flatten(graph, sf, users)
                if flat is not None:
                    nodes.append(flat.name)
        elif (chain := matmul_chain(graph, node, users)) is not None:
            kind = "MatMul"
            nodes += [n.name for n in chain]
        taken.update(nodes)
        out[node.name] = (kind, tuple(nodes))
    return out


def unit_label(kind: str, nodes: tuple) -> str:
    """The name of the unit that runs ``nodes``: its first node's, but a MatMul's is its Accum's (the logical
    matmul's name, as the model reports it)."""
    return nodes[-1] if kind == "MatMul" else nodes[0]


def counted_kinds(graph: Graph) -> dict[str, int]:
    """Units of each kind ``graph`` needs (a buffer counts as a Bufferize and a Streamify, as fabrics list
    them)."""
    need: dict[str, int] = {}
    for kind, nodes in units(graph).values():
        for k in [kind] + (["Streamify"] if kind == "Bufferize" and len(nodes) > 1 else []):
            need[k] = need.get(k, 0) + 1
    return need
