"""Tile pools: which on-chip buffers share one (:class:`~step_hdl.units.pool.TilePool`) and how many pages it
needs.

A buffer is sized on its own for the largest chunk it could get. For the buffers of dynamically sized tiles
that one routing decision fills, that is far more than they can hold together: the experts of an MoE layer
get ``B · top-k`` rows between them (:mod:`step_hdl.counts`), but each could get ``B``. So such buffers take
their entries from one pool, a page at a time, and the pool is sized by the bound on what they hold together.

A Bufferize joins a pool when

* its Streamify reads it linearly (a repeat count or a ref; no affine or transposed read);
* its chunk (the buffer's shape) is ``[D, r_1, .., r_k]`` with static ``r_j`` and ``D`` one of ``n``,
  ``ceil(n / q)`` or the ``Max`` of such over several count symbols ``n`` of one Partition
  (:func:`step_hdl.counts.count_groups`), with one ``q`` (rows per block: ``P`` for packed tiles);
* the chunks it receives are at most one per such symbol (its input's outer size is the sum of
  ``Min(1, n)`` over them: one dynamically sized tile per expert, as dynamic tiling makes, also when a
  time-multiplexed region's buffer takes several experts' tiles in turn);
* no other pooled buffer holds the same symbol's rows.

Each unit of ``D`` (a block of ``q`` rows) is one page of ``r_1 ··· r_k + r_1 ··· r_(k-1)`` entries (its
tiles and the inner stops that a linear read keeps), so a buffer's chunk takes ``ceil(n / q)`` pages and a
pool whose buffers hold ``m`` of the Partition's ``E`` symbols needs at most
:meth:`~step_hdl.counts.CountGroup.blocks` pages: ``m' + floor((T - m') / q)`` with ``T`` the bound on the
rows and ``m' = min(m, T)``. Buffers of one Partition and one tile format share a pool when there are at
least two of them; any other buffer keeps an SRAM of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from step_hdl.counts import CountGroup, count_groups

from .fabric import FabricError


@dataclass(frozen=True)
class PoolPlan:
    """One pool: its buffers (Bufferize node names), the count group that bounds them, and its pages.

    ``rows_per_page``: the ``q`` rows of a dynamic tile one page holds; ``page_entries``: entries per page;
    ``symbols``: the count symbols the buffers hold; ``bound``: pages the buffers can need at once, at most.
    """

    name: str
    buffers: tuple
    group: CountGroup
    rows_per_page: int
    page_entries: int
    symbols: tuple
    tile: tuple

    @property
    def bound(self) -> int:
        return self.group.blocks(self.rows_per_page, len(self.symbols))

    def need(self, bindings: dict | None) -> int | None:
        """Pages this program's chunks take together (every buffer holding its chunk at once), from the
        bindings of the count symbols; None when a binding is missing."""
        values = {str(k): v for k, v in (bindings or {}).items()}
        if any(s not in values for s in self.symbols):
            return None
        q = self.rows_per_page
        return sum(-(-int(values[s]) // q) for s in self.symbols)

    def page_bytes(self, tile_bytes: int) -> int:
        return self.page_entries * tile_bytes

    def report(self, pages: int, tile_bytes: int, bindings=None) -> dict:
        """Structured data for reports: the bound, the pages built and this program's need."""
        return {"name": self.name, "buffers": list(self.buffers), "partition": self.group.partition,
                "rows_bound": self.group.total, "rows_per_page": self.rows_per_page,
                "page_entries": self.page_entries, "page_bytes": self.page_bytes(tile_bytes),
                "bound_pages": self.bound, "pages": pages, "bytes": pages * self.page_bytes(tile_bytes),
                "need_pages": self.need(bindings)}


def _blocks_of(d) -> tuple[int, tuple] | None:
    """``(q, symbols)`` when ``d`` is ``n``, ``ceil(n / q)`` or a Max of such with one ``q``; else None."""
    d = sympy.sympify(d)
    if d.is_Symbol:
        return 1, (d.name,)
    if isinstance(d, sympy.ceiling):
        num, den = sympy.fraction(sympy.together(d.args[0]))
        if num.is_Symbol and den.is_Integer and int(den) >= 1:
            return int(den), (num.name,)
        return None
    if isinstance(d, sympy.Max):
        parts = [_blocks_of(a) for a in d.args]
        if None in parts or len({q for q, _ in parts}) != 1:
            return None
        return parts[0][0], tuple(s for _, syms in parts for s in syms)
    return None


def _one_chunk_per_symbol(outer, symbols) -> bool:
    """The buffer's input has at most one chunk per count symbol: its outer size is ``sum Min(1, n)``."""
    got = sympy.sympify(outer)
    by_name = {s.name: s for s in got.free_symbols}
    if set(by_name) != set(symbols):
        return False
    return sympy.simplify(got - sum(sympy.Min(1, by_name[s]) for s in symbols)) == 0


def _candidate(node, graph, groups):
    """``(group, q, symbols, page_entries)`` for a poolable Bufferize, else None."""
    users = [graph.nodes[c] for r, c, _ in graph.edges() if r.node is node]
    if len(users) != 1 or users[0].kind != "Streamify":
        return None
    sf = users[0]
    if sf.params.get("read_shape") is not None or sf.params.get("transpose"):
        return None
    shape = list(node.out_types["out"].dtype.shape)
    if not shape or not all(sympy.sympify(r).is_Integer for r in shape[1:]):
        return None
    blocks = _blocks_of(shape[0])
    if blocks is None:
        return None
    q, symbols = blocks
    if any(s not in groups for s in symbols) or len({groups[s].partition for s in symbols}) != 1:
        return None
    st, b = node.t("in"), node.p("rank")
    outer = sympy.Mul(*st.shape[:len(st.shape) - b]) if len(st.shape) > b else sympy.Integer(1)
    if not _one_chunk_per_symbol(outer, symbols):
        return None
    rest = [int(r) for r in shape[1:]]
    entries = (int(sympy.Mul(*rest)) + int(sympy.Mul(*rest[:-1]))) if rest else 1
    return groups[symbols[0]], q, symbols, entries


def tile_pools(graph) -> list[PoolPlan]:
    """The pools of a lowered ``graph`` (see the module docstring), in topological order of their buffers."""
    groups = count_groups(graph)
    found: dict = {}
    held: set = set()
    for node in graph.topological_order():
        if node.kind != "Bufferize":
            continue
        cand = _candidate(node, graph, groups)
        if cand is None:
            continue
        group, q, symbols, entries = cand
        if held & set(symbols):
            continue            # those rows are pooled in another buffer already: counting them twice is unsafe
        held |= set(symbols)
        t = node.t("in").dtype
        key = (group.partition, int(t.rows), int(t.cols), t.dtype.name, q)
        found.setdefault(key, []).append((node.name, symbols, entries))
    pools = []
    for (part, rows, cols, dt, q), members in found.items():
        if len(members) < 2:
            continue
        name = f"pool_{part}" + (f"_{len(pools)}" if any(p.group.partition == part for p in pools) else "")
        pools.append(PoolPlan(name, tuple(n for n, _, _ in members), groups[members[0][1][0]], q,
                              max(e for _, _, e in members), tuple(s for _, syms, _ in members for s in syms),
                              (rows, cols, dt)))
    return pools


def pool_pages(pool: PoolPlan, fabric) -> int:
    """Pages the fabric builds for ``pool``: ``fabric.pool_pages``, or the pool's bound when that is 0."""
    return fabric.pool_pages or pool.bound


def check_pool(pool: PoolPlan, fabric, bindings) -> str | None:
    """A :class:`FabricError` when this program's chunks need more pages than the fabric's pool has (named,
    with the pages needed); a note (returned) when the pool is below its bound, so a routing with more rows in
    fewer experts than this one could wait for pages (the pool's ``starved`` flag says so at run time)."""
    pages, need = pool_pages(pool, fabric), pool.need(bindings)
    if need is not None and need > pages:
        raise FabricError(f"tile pool '{pool.name}' (buffers {', '.join(pool.buffers[:4])}"
                          f"{', ...' if len(pool.buffers) > 4 else ''}): this program's tiles need {need} pages of "
                          f"{pool.rows_per_page} rows at once; the fabric's pools have {pages} (pool_pages): "
                          f"raise pool_pages to at least {need} (the bound for any routing is {pool.bound})")
    if pages < pool.bound:
        return (f"tile pool '{pool.name}': {pages} pages, below the bound of {pool.bound} for any routing of "
                f"{pool.group.total} rows; a routing that needs more waits for pages (flag 'starved')")
    return None
