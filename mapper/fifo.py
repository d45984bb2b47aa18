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

:func:`edge_depth` is the depth an edge is built with: the safe bound is
structural only up to the fabric's ``max_fifo_depth``, except where a branch
must hold a whole chunk that another branch of its fan-out takes whole first
(:func:`whole_chunk_edges`: ``x - sum(x)``), which gets a FIFO that holds it; :func:`join_inputs` (the
inputs of an in-order Reassemble) get that deep FIFO too, for throughput.
:func:`edge_fifos` gives it, beside the safe bound, for every edge. The plan
(``mapper.plan``) and the approximate model (``sim.model``) both take their FIFO
depths from it.
"""

from __future__ import annotations

from step_hdl.graph import Graph
from step_hdl.types import concrete

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


def _fan_outs(graph: Graph):
    """Each node with several outputs, with the nodes each output reaches (label -> names, its consumer
    included), not through a cycle's back edge: a cycle's paths are bounded by its credits (the EagerMerge that
    closes it), not by FIFOs."""
    succ: dict[str, list[str]] = {}
    for ref, consumer, _ in graph.edges():
        if graph.nodes[consumer].kind != "Feedback":
            succ.setdefault(ref.node.name, []).append(consumer)
    for node in graph.nodes.values():
        if len(node.out_types) < 2:
            continue
        reach = {}
        for ref in node.outputs:
            consumer = next(c for r, c, _ in graph.edges() if r.label == ref.label)
            reach[ref.label] = _reach(graph, consumer, succ) | {consumer}
        yield node, reach


def _chunk_held(node, stream_type, bindings) -> int | None:
    """Elements of one chunk that ``node`` takes whole before it emits anything (``takes_chunks``: an Accum, a
    Bufferize), when its input has the shape of ``stream_type`` (the fan-out's stream, passed on element for
    element); None otherwise or when that size is dynamic."""
    if not node.takes_chunks or "in" not in node.inputs:
        return None
    st = node.inputs["in"].type
    if tuple(st.shape) != tuple(stream_type.shape):
        return None
    # the elements that go into one output element (an Accum's sum, a Bufferize's buffer)
    return concrete(st.elements / next(iter(node.out_types.values())).elements, bindings)


def whole_chunk_edges(graph: Graph, bindings: dict | None = None) -> dict[str, int]:
    """The reconvergent fan-out edges whose branch must hold a whole chunk of the stream: another branch of the
    fan-out takes a chunk whole (an Accum or a Bufferize on the same stream: a sum over a row that every element
    of the row then uses, as in ``x - mean(x)``) before the branches meet again, so this one holds every element
    of that chunk meanwhile. Label -> its depth: the chunk's tokens (elements, a stop each, done)."""
    need: dict = {}
    for node, reach in _fan_outs(graph):
        held = {}
        for label, mine in reach.items():
            st = node.out_types[label.split(".")[1]]
            held[label] = max([h for name in mine if (h := _chunk_held(graph.nodes[name], st, bindings)) is not None]
                              or [0])
        for label, mine in reach.items():
            for other, theirs in reach.items():
                # ``other`` holds what ``label`` takes whole beyond what ``other`` takes whole itself (two
                # matmuls buffering the same operand take it side by side: neither holds the other up)
                extra = held[label] - held[other]
                if other != label and mine & theirs and extra > 0:
                    need[other] = max(need.get(other, 0), 2 * extra + 1)
    return need


def fifo_depths(graph: Graph, default: int = 2, bindings: dict | None = None) -> dict[str, int]:
    """Depth of every edge (keyed ``producer.port``): ``default``, or more on reconvergent fan-outs."""
    depths = {ref.label: default for ref, _, _ in graph.edges()}
    for node, reach in _fan_outs(graph):
        for label, mine in reach.items():
            others = set().union(*(r for l2, r in reach.items() if l2 != label))
            if mine & others:
                st = node.out_types[label.split(".")[1]]
                n = concrete(2 * st.elements + 1, bindings)
                depths[label] = max(default, n) if n is not None else UNBOUNDED
    return depths


def edge_depth(safe: int, fifo_depth: int, max_fifo_depth: int, join: bool = False, chunk: int = 0,
               chunk_fifo_depth: int = 0) -> int:
    """The depth an edge's FIFO is built with, from its safe depth (:func:`fifo_depths`) and whether it is
    one of :func:`join_inputs`.

    An ordinary edge gets the fabric's ``fifo_depth``; a reconvergent fan-out (safe depth above it) or a
    join input gets the fabric's deep FIFO, ``max_fifo_depth``, whatever its safe depth: one depth for
    every program, so a sweep shares the build. Its safe depth may be more, which the mapping report notes
    and the watchdog catches if the paths really are unbalanced; but a branch that must hold a whole chunk
    (``chunk``: its tokens, :func:`whole_chunk_edges`) gets a FIFO that holds it, a power of two, up to the
    fabric's ``chunk_fifo_depth`` (a longer chunk keeps ``max_fifo_depth``, and a deadlock names the edge).
    """
    if max_fifo_depth < chunk and 1 << (chunk - 1).bit_length() <= chunk_fifo_depth:
        return 1 << (chunk - 1).bit_length()
    return max_fifo_depth if join or safe > fifo_depth else fifo_depth


def join_inputs(graph: Graph) -> set[str]:
    """The data edges into a Reassemble (keyed ``producer.port``), built with the deep FIFO.

    Not for safety (the fan-out side of a Partition -> Reassemble pair already holds what a branch has not
    answered) but for throughput: the Reassemble takes its inputs in selector order, so a branch whose
    tokens are not wanted yet stops as soon as its FIFO is full, and with ordinary FIFOs the branches of the
    MoE layer's experts block each other (static token tiles of 16 rows on ``mixtral_b64``: 1,900 RTL
    cycles with 2-deep join FIFOs, 1,651 with 64-deep ones).
    """
    return {ref.label for ref, consumer, port in graph.edges()
            if graph.nodes[consumer].kind == "Reassemble" and port != "sel"}


def edge_fifos(graph: Graph, fifo_depth: int, max_fifo_depth: int, bindings: dict | None = None,
               chunk_fifo_depth: int = 0) -> dict[str, tuple[int, int]]:
    """Every edge of ``graph`` (keyed ``producer.port``): ``(depth built, safe depth)``, the first by
    :func:`edge_depth`, the second by :func:`fifo_depths`. The plan builds these; :func:`capped_depths` and
    :func:`capped_edges` are what the model and a deadlock's message read of them."""
    joins, chunks = join_inputs(graph), whole_chunk_edges(graph, bindings)
    return {label: (edge_depth(safe, fifo_depth, max_fifo_depth, label in joins, chunks.get(label, 0),
                               chunk_fifo_depth), safe)
            for label, safe in fifo_depths(graph, fifo_depth, bindings).items()}


def capped_depths(graph: Graph, fifo_depth: int, max_fifo_depth: int, bindings: dict | None = None,
                  chunk_fifo_depth: int = 0) -> dict:
    """:func:`edge_depth` of every edge of ``graph`` (keyed ``producer.port``)."""
    return {label: built for label, (built, _) in
            edge_fifos(graph, fifo_depth, max_fifo_depth, bindings, chunk_fifo_depth).items()}


def capped_edges(fifos: dict) -> dict:
    """The edges of ``fifos`` (:func:`edge_fifos`) built below their safe depth (reconvergent fan-outs capped
    at ``max_fifo_depth``): label -> (depth built, safe depth, None where it is dynamic)."""
    return {label: (built, None if safe >= UNBOUNDED else safe)
            for label, (built, safe) in fifos.items() if safe > built}


def capped_hints(capped: dict, held) -> list[str]:
    """For a deadlock: each edge of ``held`` (labels of channels holding tokens) that :func:`capped_edges`
    capped, with the depth its stream needs and the fabric field that gives it."""
    lines = []
    for label in held:
        if label not in capped:
            continue
        built, safe = capped[label]
        need = f"needs up to {safe:,} tokens" if safe is not None else "has no static bound (a dynamic size)"
        lines.append(f"edge {label} was built {built} deep, the fabric's max_fifo_depth (the cap on a reconvergent "
                     f"fan-out's FIFO), and its stream {need}: a fabric file (--fabric) with \"max_fifo_depth\": "
                     f"{safe if safe is not None else 2 * built} (or more) lifts it")
    return lines
