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

Off-chip layout: ``q`` and ``out`` are ``[items·G, d]``; ``K`` and ``V`` hold
the rows of item 0, then item 1, ... (``[Σ L_b·heads, d]``); ``kv_table`` is
``[items, 2]`` int32 ``(start row, length)``.
"""

from __future__ import annotations

import numpy as np

from ..functions import fn
from ..graph import Graph
from ..types import Selector, StreamType, dtype as make_dtype, dyn
from .base import Workload

STRATEGIES = ("interleaved", "contiguous", "dynamic")


def static_assignment(batch: int, regions: int, strategy: str) -> np.ndarray:
    """Region of each request under a static strategy."""
    b = np.arange(batch)
    if strategy == "interleaved":
        return b % regions
    if strategy == "contiguous":
        return b * regions // batch
    raise ValueError(f"strategy {strategy!r} is not static; static strategies: interleaved, contiguous")


def gqa_graph(batch, kv_heads, group, head_dim, regions, strategy, dt="fp32", total_rows=None,
              credits: int = 2) -> Graph:
    dt = make_dtype(dt)
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if dt.is_int:
        raise ValueError("GQA decode is defined for floating-point types (fp32, bf16)")
    items = batch * kv_heads
    G, d = group, head_dim
    rows = total_rows if total_rows is not None else dyn("kv_rows")
    g = Graph(f"gqa_{strategy}_r{regions}")
    g.tensor("q", items * G, d, dt)
    g.tensor("K", rows, d, dt)
    g.tensor("V", rows, d, dt)
    g.tensor("kv_table", items, 2, "int32")
    g.tensor("out", items * G, d, dt)

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
        q = g.random_load(i_q, "q", tile=(G, d), name=p + "load_q")
        meta_k, meta_v = g.broadcast(g.random_load(i_kv, "kv_table", tile=(1, 2), name=p + "load_kv_table"),
                                     2, name=p + "bcast_meta")
        packed = []
        for t, meta in (("K", meta_k), ("V", meta_v)):
            addrs = g.flat_map(meta, "range", name=f"{p}rows_{t.lower()}")
            rows_s = g.random_load(addrs, t, tile=(1, d), name=f"{p}load_{t.lower()}")
            packed.append(g.accum(rows_s, "retile_row", fn("zeros", rows=0, cols=d, dtype=dt.name), 1,
                                  name=f"{p}pack_{t.lower()}"))
        k_t, v_t = packed
        s = g.map([q, k_t], fn("matmul", transpose_b=True), name=p + "scores")
        s1, s2 = g.broadcast(s, 2, name=p + "bcast_s")
        m = g.map(s1, "row_max", name=p + "row_max")
        e = g.map(g.map([s2, m], "sub", name=p + "shift"), "exp", name=p + "exp")
        e1, e2 = g.broadcast(e, 2, name=p + "bcast_e")
        denom = g.map(e1, "row_sum", name=p + "row_sum")
        o = g.map([e2, v_t], "matmul", name=p + "pv")
        out = g.map([o, denom], "div", name=p + "normalize")
        ack = g.random_store(i_st, out, "out", tile=(G, d), name=p + "store")
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
    q = (rng.standard_normal((B * kv_heads * group, head_dim)) / np.sqrt(head_dim)).astype(np.float32)
    k = rng.standard_normal((total, head_dim)).astype(np.float32)
    v = rng.standard_normal((total, head_dim)).astype(np.float32)
    table = np.stack([starts, lens], axis=1).astype(np.int32)
    out = gqa_reference(q, k, v, table, group)
    params = dict(batch=B, kv_heads=kv_heads, group=group, head_dim=head_dim, regions=regions,
                  strategy=strategy, dtype=dt.name)
    return Workload(g, {"q": q, "K": k, "V": v, "kv_table": table}, {}, {"out": out}, dt,
                    params=params, rtol=1e-4, atol=1e-5)


def scale_lengths(kv_lens, factor: int) -> np.ndarray:
    """Shrink trace lengths by ``factor`` (at least 1), keeping their spread."""
    return np.maximum(1, np.asarray(kv_lens) // factor)
