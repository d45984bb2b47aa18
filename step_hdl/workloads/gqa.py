"""Grouped-query attention decode, parallelized across regions.

A work item is one (request, KV head) pair: ``G`` query heads share one KV
head. For each item a region loads its query tile ``[G, d]`` (pre-scaled by
``1/sqrt(d)``), looks up the item's ``(start, length)`` in the KV table, streams
that many K and V rows, packs them into one dynamically sized tile
``[L, d]`` each (dynamic tiling of the ragged KV length), computes
``softmax(q·Kᵀ)·V`` and stores the ``[G, d]`` result at the item's slot.

Items are distributed over ``regions`` parallel regions:

* ``interleaved``: request ``b`` goes to region ``b mod R``;
* ``contiguous``: requests are split into ``R`` consecutive blocks;
* ``dynamic``: each region announces when it can take more work (``credits``
  initial announcements, default 2 so a region loads its next item while it
  computes the current one, then one per finished item); an EagerMerge of
  those announcements is the selector that Partitions the next item to the
  first free region (a cycle through the EagerMerge, closed with
  ``Graph.feedback``).

The attention is computed transposed, so that the dynamic length ``L`` is a row
count (packed into ``P``-row blocks in hardware, see :mod:`step_hdl.mapper.tiling`):
``qᵀ`` is ``[d, G]``, the scores ``sᵀ = K·qᵀ`` are ``[L, G]``, softmax runs down
the columns (``col_max``, ``exp``, ``col_sum``), and ``outᵀ = Vᵀ·e`` (a matmul
with ``transpose_a``, contracting over ``L``) is divided by the column sums.

Off-chip layout: ``qT`` and ``outT`` are ``[d, items·G]``; ``K`` and ``V`` hold
the rows of item 0, then item 1, ... (``[Σ L_b·heads, d]``); ``kv_table`` is
``[items, 2]`` int32 ``(start row, length)``.

Integer types (int8/int16) give a fixed-point variant: the scores requantized to
``frac`` fractional bits (``>> shift``), a floor division, ``outT`` stored as
int32; :func:`gqa_reference_int` is its numpy twin. Float types (bf16, fp32)
compute in their format, the sums in fp32 (:mod:`step_hdl.floats`), against the
float64 :func:`gqa_reference`.
"""

from __future__ import annotations

import numpy as np

from ..functions import fn
from ..graph import Graph
from ..types import Selector, StreamType, dtype as make_dtype, dyn
from .base import Workload, random_tensor

STRATEGIES = ("interleaved", "contiguous", "dynamic")


def static_assignment(batch: int, regions: int, strategy: str) -> np.ndarray:
    """Region of each request under a static strategy."""
    b = np.arange(batch)
    if strategy == "interleaved":
        return b % regions
    if strategy == "contiguous":
        return b * regions // batch
    raise ValueError(f"strategy {strategy!r} is not static; static strategies: interleaved, contiguous")


#: fixed-point variant: scores ``>> SHIFT`` give ``FRAC`` fractional bits for ``exp``
SHIFT, FRAC = 3, 8


def _attention_float(g, p, i_q, k_t, v_t, dt, G, d):
    """``outᵀ = (softmax(q·Kᵀ)·V)ᵀ`` for one item, ``[d, G]``, computed transposed as the integer variant is
    (the dynamic length ``L`` a row count): ``sᵀ = K·qᵀ`` ``[L, G]``, softmax down its columns, ``Vᵀ·e``; the
    column sum and ``Vᵀ·e`` sum in fp32 in the fixed order, each rounded once to ``dt``."""
    q_t = g.random_load(i_q, "qT", tile=(d, G), name=p + "load_q")
    s = g.map([k_t, q_t], "matmul", name=p + "scores")                          # [L, G]
    s1, s2 = g.broadcast(s, 2, name=p + "bcast_s")
    m = g.map(s1, "col_max", name=p + "col_max")                                # [1, G]
    e = g.map(g.map([s2, m], "sub", name=p + "shift"), "exp", name=p + "exp")
    e1, e2 = g.broadcast(e, 2, name=p + "bcast_e")
    denom = g.map(e1, "col_sum", name=p + "col_sum")                            # [1, G]
    o = g.map([v_t, e2], fn("matmul", transpose_a=True), name=p + "pv")          # [d, G]
    return g.map([o, denom], "div", name=p + "normalize")


def _attention_int(g, p, i_q, k_t, v_t, dt, G, d):
    """The fixed-point, transposed twin: ``outᵀ``, ``[d, G]`` int32."""
    q_t = g.random_load(i_q, "qT", tile=(d, G), name=p + "load_q")
    s = g.map([k_t, q_t], "matmul", name=p + "scores")                          # [L, G] int32
    s = g.map(s, fn("requantize", shift=SHIFT, dtype=dt.name), name=p + "scores_fixed")
    s1, s2 = g.broadcast(s, 2, name=p + "bcast_s")
    m = g.map(s1, "col_max", name=p + "col_max")                                # [1, G]
    z = g.map(g.map([s2, m], "sub", name=p + "shift"), fn("requantize", shift=0, dtype=dt.name),
              name=p + "shift_fixed")
    e = g.map(z, fn("exp", frac=FRAC), name=p + "exp")
    e1, e2 = g.broadcast(e, 2, name=p + "bcast_e")
    denom = g.map(e1, "col_sum", name=p + "col_sum")                            # [1, G] int32
    o = g.map([v_t, e2], fn("matmul", transpose_a=True), name=p + "pv")          # [d, G] int32
    return g.map([o, denom], "div", name=p + "normalize")


def gqa_graph(batch, kv_heads, group, head_dim, regions, strategy, dt="fp32", total_rows=None,
              credits: int = 2) -> Graph:
    dt = make_dtype(dt)
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if dt.is_int and dt.bits > 16:
        raise ValueError(f"GQA decode is defined for fp32, bf16 and the fixed-point int8/int16, got {dt}")
    items = batch * kv_heads
    G, d = group, head_dim
    rows = total_rows if total_rows is not None else dyn("kv_rows")
    g = Graph(f"gqa_{strategy}_r{regions}")
    g.tensor("qT", d, items * G, dt)
    g.tensor("K", rows, d, dt)
    g.tensor("V", rows, d, dt)
    g.tensor("kv_table", items, 2, "int32")
    g.tensor("outT", d, items * G, "int32" if dt.is_int else dt)
    attention = _attention_int if dt.is_int else _attention_float

    work = g.index_source(values=list(range(items)), name="items")
    if strategy == "dynamic":
        sel = g.feedback(StreamType(Selector(regions), (dyn("credits"),)), name="free_region")
    else:
        assign = np.repeat(static_assignment(batch, regions, strategy), kv_heads)
        sel = g.selector_source(regions, values=[[int(a)] for a in assign], name="assign")
    parts = g.partition(work, sel, regions, rank=0, name="dispatch")

    announces = []
    for r, mine in enumerate(parts):
        p = f"r{r}_"
        i_q, i_kv, i_st = g.broadcast(mine, 3, name=p + "bcast_item")
        meta = g.random_load(i_kv, "kv_table", tile=(1, 2), name=p + "load_kv_table")
        # one row-address stream for K and V: their packed tiles share the item's length L
        rows_kv = g.broadcast(g.flat_map(meta, "range", name=p + "rows"), 2, name=p + "bcast_rows")
        packed = []
        for t, addrs in zip(("K", "V"), rows_kv):
            rows_s = g.random_load(addrs, t, tile=(1, d), name=f"{p}load_{t.lower()}")
            packed.append(g.accum(rows_s, "retile_row", fn("zeros", rows=0, cols=d, dtype=dt.name), 1,
                                  name=f"{p}pack_{t.lower()}"))
        out = attention(g, p, i_q, *packed, dt, G, d)
        ack = g.random_store(i_st, out, "outT", tile=(d, G),
                             name=p + "store")
        if strategy == "dynamic":
            credit = g.index_source(values=[r] * credits, name=p + "credit")
            free, free_sel = g.eager_merge([credit, ack], rank=0, name=p + "free")
            g.output(free_sel, name=p + "free_sel_sink")
            announces.append(free)
        else:
            g.output(ack, name=p + "acks")
    if strategy == "dynamic":
        merged, which = g.eager_merge(announces, rank=0, name="first_free")
        g.output(merged, name="credits_sink")
        g.bind(sel, which)
    return g


def gqa_reference(q, k_rows, v_rows, table, group) -> np.ndarray:
    out = np.zeros_like(q, dtype=np.float64)
    for i, (start, length) in enumerate(table):
        qi = q[i * group:(i + 1) * group].astype(np.float64)
        k = k_rows[start:start + length].astype(np.float64)
        v = v_rows[start:start + length].astype(np.float64)
        s = qi @ k.T
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[i * group:(i + 1) * group] = (p @ v) / p.sum(axis=1, keepdims=True)
    return out.astype(np.float32)


def gqa_reference_int(q_t, k_rows, v_rows, table, group, dt="int16") -> np.ndarray:
    """numpy twin of the fixed-point variant: ``outT`` ``[d, items·G]`` int32 (bit-exact with the library)."""
    from ..functions import exp_fixed, saturate, wrap_int32
    dt = make_dtype(dt)
    out = np.zeros(q_t.shape, dtype=np.int32)
    for i, (start, length) in enumerate(table):
        qi = q_t[:, i * group:(i + 1) * group].astype(np.int64)
        k = k_rows[start:start + length].astype(np.int64)
        v = v_rows[start:start + length].astype(np.int64)
        s = saturate(wrap_int32(k @ qi).astype(np.int64) >> SHIFT, dt)          # [L, G]
        z = saturate(s.astype(np.int64) - s.max(axis=0, keepdims=True), dt)
        e = exp_fixed(z, FRAC, dt).astype(np.int64)
        denom = wrap_int32(e.sum(axis=0, keepdims=True)).astype(np.int64)
        num = wrap_int32(v.T @ e).astype(np.int64)                              # [d, G]
        out[:, i * group:(i + 1) * group] = np.floor_divide(num, denom)
    return out


def gqa_decode(kv_lens, kv_heads=1, group=4, head_dim=16, regions=4, strategy="dynamic", dtype="fp32",
               seed=0, credits: int = 2) -> Workload:
    """GQA decode over a batch with KV lengths ``kv_lens`` (e.g. a real trace, scaled down)."""
    dt = make_dtype(dtype)
    kv_lens = np.asarray(kv_lens, dtype=np.int64)
    if (kv_lens < 1).any():
        raise ValueError("every KV length must be >= 1")
    B = len(kv_lens)
    lens = np.repeat(kv_lens, kv_heads)  # item (b, h) has request b's length
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    total = int(lens.sum())
    g = gqa_graph(B, kv_heads, group, head_dim, regions, strategy, dt, total_rows=total, credits=credits)
    rng = np.random.default_rng(seed)
    table = np.stack([starts, lens], axis=1).astype(np.int32)
    params = dict(batch=B, kv_heads=kv_heads, group=group, head_dim=head_dim, regions=regions,
                  strategy=strategy, dtype=dt.name)
    # the longest KV chunk any region packs (sizes on-chip buffers; the per-region totals depend on the run)
    subs = {f"r{r}_rows_len_max": int(lens.max()) for r in range(regions)}
    if dt.is_int:
        # small magnitudes: scores >> SHIFT stay within a few units of fixed point (exp's useful range)
        lim = min(40, dt.max)
        q_t = rng.integers(-lim, lim + 1, (head_dim, B * kv_heads * group)).astype(dt.numpy)
        k = rng.integers(-lim, lim + 1, (total, head_dim)).astype(dt.numpy)
        v = rng.integers(-min(100, dt.max), min(100, dt.max) + 1, (total, head_dim)).astype(dt.numpy)
        out = gqa_reference_int(q_t, k, v, table, group, dt)
        return Workload(g, {"qT": q_t, "K": k, "V": v, "kv_table": table}, {}, {"outT": out}, dt, subs=subs,
                        params=params)
    q, k, v = (random_tensor(rng, shape, dt, scale) for shape, scale in (
        ((B * kv_heads * group, head_dim), 1 / np.sqrt(head_dim)), ((total, head_dim), 1.0), ((total, head_dim), 1.0)))
    out = gqa_reference(q, k, v, table, group)
    return Workload(g, {"qT": np.ascontiguousarray(q.T), "K": k, "V": v, "kv_table": table}, {},
                    {"outT": np.ascontiguousarray(out.T)}, dt, subs=subs, params=params)


def scale_lengths(kv_lens, factor: int) -> np.ndarray:
    """Shrink trace lengths by ``factor`` (at least 1), keeping their spread."""
    return np.maximum(1, np.asarray(kv_lens) // factor)
