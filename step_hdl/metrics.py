"""Symbolic metrics of a STeP graph (spec section 4).

For every node: off-chip traffic (bytes), on-chip memory requirement (bytes) and
FLOPs, as sympy expressions over the graph's dimension symbols; totals and
operational intensity (FLOPs per off-chip byte). The on-chip total is exact for
static allocation and an upper bound for dynamic allocation.

Rules (per operator, see :mod:`step_hdl.ops`):

* off-chip loads/stores move ``tiles × tile bytes`` and hold two tiles (double
  buffering);
* Bufferize holds one input element plus two copies of its buffer;
* Accum, Scan, Expand and RepeatStatic hold one output element;
* a matmul Map holds its weight tile and one row of its input tile;
* FLOPs: per call of the function (matmul ``2·m·k·n``, element-wise 1 per
  element, exp 4, SiLU 8) times the number of calls.

The on-chip bytes of dynamically sized tiles that one Partition's counts size
(an MoE's expert tiles) have a static bound besides: the counts sum to at most
the Partition's input chunks times the selector's choices
(:mod:`step_hdl.counts`), so :func:`dynamic_pools` reports, per Partition,
what those nodes hold for any routing and what they hold for given counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from .graph import Graph
from .types import Ragged, ragged_max, ragged_total, to_max


@dataclass
class NodeMetrics:
    name: str
    kind: str
    offchip_bytes: sympy.Expr
    onchip_bytes: sympy.Expr
    flops: sympy.Expr


@dataclass
class Metrics:
    """Per-node and total metrics; all fields are sympy expressions."""

    nodes: list[NodeMetrics]

    @property
    def offchip_bytes(self) -> sympy.Expr:
        return sympy.simplify(sum((n.offchip_bytes for n in self.nodes), sympy.Integer(0)))

    @property
    def onchip_bytes(self) -> sympy.Expr:
        return sympy.simplify(sum((n.onchip_bytes for n in self.nodes), sympy.Integer(0)))

    @property
    def flops(self) -> sympy.Expr:
        return sympy.simplify(sum((n.flops for n in self.nodes), sympy.Integer(0)))

    @property
    def operational_intensity(self) -> sympy.Expr:
        return sympy.simplify(self.flops / self.offchip_bytes)

    def symbols(self) -> set:
        out = set()
        for n in self.nodes:
            for e in (n.offchip_bytes, n.onchip_bytes, n.flops):
                out |= sympy.sympify(e).free_symbols
        return out

    def subs(self, values: dict) -> "Metrics":
        """Substitute concrete values (keys: symbols or their names)."""
        table = _symbol_table(values)
        return Metrics([NodeMetrics(n.name, n.kind, _subs(n.offchip_bytes, table), _subs(n.onchip_bytes, table),
                                    _subs(n.flops, table)) for n in self.nodes])

    def pools(self, graph: Graph, values: dict | None = None) -> list[dict]:
        """:func:`dynamic_pools` of these metrics' graph."""
        return dynamic_pools(self, graph, values)

    def to_dict(self, values: dict | None = None) -> dict:
        """Plain data: integers where fully substituted, strings otherwise."""
        m = self.subs(values) if values else self

        def conv(e):
            e = sympy.simplify(e)
            if e.is_Integer:
                return int(e)
            if e.is_number:
                return float(e)
            return str(e)
        total_off = m.offchip_bytes
        return {
            "offchip_bytes": conv(total_off),
            "onchip_bytes": conv(m.onchip_bytes),
            "flops": conv(m.flops),
            # FLOPs per byte to four decimals (a ratio of integers: more digits say nothing)
            "operational_intensity": _rounded(conv(m.flops / total_off)) if total_off != 0 else None,
            "nodes": [{"name": n.name, "kind": n.kind, "offchip_bytes": conv(n.offchip_bytes),
                       "onchip_bytes": conv(n.onchip_bytes), "flops": conv(n.flops)} for n in m.nodes],
        }


def dynamic_pools(m: Metrics, graph: Graph, values: dict | None = None) -> list[dict]:
    """Per Partition whose counts size on-chip memory: the nodes, the bound on their bytes for any routing and
    (with ``values``) their bytes for these counts.

    A node counts when its on-chip bytes are linear in the counts of one Partition (a ``Max`` of counts, a
    buffer that holds one of several tiles at a time, is bounded by their sum); with ``C_i`` the bytes per
    unit of count ``n_i`` over all those nodes and ``T`` the bound on the counts' sum, they hold at most
    ``max_i C_i · T`` bytes besides their static part.
    """
    from .counts import count_groups
    groups = count_groups(graph)
    table = _symbol_table(values or {})
    out: dict = {}
    for n in m.nodes:
        e = sympy.sympify(n.onchip_bytes)
        names = {s.name for s in e.free_symbols}
        parts = {groups[s].partition for s in names if s in groups}
        if not names or len(parts) != 1 or not names <= set(groups[next(iter(names))].symbols):
            continue
        upper = e.replace(lambda x: isinstance(x, sympy.Max), lambda x: sympy.Add(*x.args))
        syms = sorted(upper.free_symbols, key=lambda s: s.name)
        try:
            poly = sympy.Poly(sympy.expand(upper), *syms)
        except sympy.PolynomialError:
            continue
        if poly.total_degree() > 1 or any(c < 0 for c in poly.coeffs()):
            continue
        g = groups[syms[0].name]
        p = out.setdefault(g.partition, {"partition": g.partition, "rows_bound": g.total, "nodes": [],
                                         "per_count": {}, "need_bytes": 0, "static_bytes": 0})
        p["nodes"].append(n.name)
        const = int(poly.coeff_monomial(1))
        p["static_bytes"] += const
        for s in syms:
            p["per_count"][s.name] = p["per_count"].get(s.name, 0) + int(poly.coeff_monomial(s))
        got = _subs(e, table)
        p["need_bytes"] = None if p["need_bytes"] is None or got.free_symbols else p["need_bytes"] + int(got) - const
    for p in out.values():
        p["bound_bytes"] = max(p.pop("per_count").values()) * p["rows_bound"]
        if not values:
            p["need_bytes"] = None
    return list(out.values())


def _symbol_table(values: dict) -> dict:
    table = {}
    for k, v in values.items():
        if isinstance(k, str):
            table[k] = v
        else:
            table[k.name] = v
    return table


def _subs(expr, table: dict):
    expr = sympy.sympify(expr)
    mapping = {s: table[s.name] for s in expr.free_symbols if s.name in table}
    return sympy.simplify(expr.subs(mapping)) if mapping else expr


def _rounded(value):
    return round(value, 4) if isinstance(value, float) else value


def metrics(graph: Graph) -> Metrics:
    """Symbolic metrics of every node of ``graph``."""
    nodes = []
    for node in graph.nodes.values():
        # a buffer holding a ragged-size element is sized for the largest one
        nodes.append(NodeMetrics(node.name, node.kind, sympy.sympify(node.offchip_bytes()),
                                 to_max(node.onchip_bytes()), sympy.sympify(node.flops())))
    return Metrics(nodes)


def workload_values(m: Metrics, workload) -> tuple[dict, bool]:
    """The values that substitute ``m`` (the metrics of ``workload``'s graph): the workload's own sizes, and
    the dynamic sizes it leaves free as observed in an interpreter run; and whether a run was needed."""
    values = dict(workload.subs)
    if not {s.name for s in m.subs(values).symbols()}:
        return values, False
    values.update(observed_symbols(workload.graph, workload.run()))
    return values, True


def observed_symbols(graph: Graph, result) -> dict:
    """Values of the graph's dynamic dimensions as observed in an interpreter run.

    For every edge whose stream shape has a symbolic dimension, the recorded
    tokens are decoded and measured: a dynamic-regular symbol gets its (single)
    size; a ragged symbol ``L`` gets ``L_total``, the sum of its lengths; a
    symbolic tile side gets the payload's size. Useful to check symbolic metrics
    against what a run really moved.
    """
    from .token import decode, nested_shape
    from .types import Tile
    seen: dict = {}
    for ref, _, _ in graph.edges():
        st = ref.type
        if all(d.is_Integer for d in st.shape) and not _symbolic_tile(st.dtype):
            continue
        toks = result.edges.get(ref.label)
        if toks is None:
            continue
        nested = decode(toks, st.rank)
        sizes = nested_shape(nested, st.rank)
        for level, d in enumerate(st.shape):
            if d.is_Symbol and isinstance(d, Ragged):
                seen[ragged_total(d).name] = sum(sizes[level])
                seen[ragged_max(d).name] = max(sizes[level], default=0)
            elif d.is_Symbol and sizes[level]:
                if len(set(sizes[level])) == 1:
                    seen.setdefault(d.name, sizes[level][0])
        if isinstance(st.dtype, Tile):
            from .token import leaves
            for side, dim in ((0, st.dtype.rows), (1, st.dtype.cols)):
                if dim.is_Symbol:
                    vals = {leaf.shape[side] for leaf in leaves(nested, st.rank)}
                    if len(vals) == 1:
                        seen.setdefault(dim.name, vals.pop())
    return seen


def _symbolic_tile(t) -> bool:
    from .types import Tile
    return isinstance(t, Tile) and not (t.rows.is_Integer and t.cols.is_Integer)


__all__ = ["Metrics", "NodeMetrics", "dynamic_pools", "metrics", "observed_symbols"]
