"""Cycles of a directed graph: its strongly connected components that hold a cycle (Tarjan's algorithm,
iterative, so a long chain does not exhaust Python's stack). Graph validation (a STeP graph's cycles need an
EagerMerge or a Bufferize on them), the interpreter and model (which nodes sit on a feedback loop) and the
layering test (modules that import one another) all ask this question."""

from __future__ import annotations


def cycles(succ: dict) -> list[list]:
    """The strongly connected components of the graph ``succ`` (node -> its successors; every node a key)
    that hold a cycle (more than one node, or a node that is its own successor), each in the order of
    ``succ``'s keys, in the order Tarjan's algorithm closes them."""
    order = {v: k for k, v in enumerate(succ)}
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    out = []
    for start in succ:
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work = [(start, iter(succ[start]))]
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1 or node in succ[node]:
                        out.append(sorted(comp, key=order.__getitem__))
            elif nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on_stack.add(nxt)
                work.append((nxt, iter(succ[nxt])))
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
    return out
