"""Mixture-of-Experts layer: routing, per-expert SwiGLU, weighting, recombination.

Tokens (rows of x) are Partitioned to experts by the routing selector (top-k:
multi-hot, so a row is copied to k experts). Each expert packs its rows into
token tiles, runs the SwiGLU dataflow of :func:`~step_hdl.workloads.swiglu.ffn_core`
on them (intermediate dimension tiled by ``tile_inter``), unpacks the output
rows, and the rows are Reassembled per token (experts in ascending index
order), weighted by the gate values and summed.

Tiling of the routed rows:

* ``static`` (``tile`` rows): Reshape with padding to ``ceil(N_e/tile)`` full
  tiles; padded rows are computed and then dropped (a Partition whose selector
  comes from the padding flags);
* ``dynamic``: all of an expert's rows form one dynamically sized tile
  ``[N_e, H]`` (Promote + Accum with RetileRow); an expert with no rows computes
  nothing and loads no weights.

Configuration time-multiplexing (``experts_per_region = g > 1``): the token
tiles of ``g`` experts are EagerMerged into one region, which loads the
weights of whichever expert's tile arrives (RandomOffChipLoad addressed from
the merge selector), and Partitions the results back by the same selector.

Weights of all experts are stacked: ``W1``/``W3`` are ``[E·H, I]`` and ``W2``
is ``[E·I, H]``; gate values ``[B, k]`` list each token's experts in ascending
expert order.
"""

from __future__ import annotations

import numpy as np

from ..functions import fn
from ..graph import Graph
from ..types import DType, dtype as make_dtype
from .base import Workload, random_tensor
from .swiglu import int_fns, ffn_core, swiglu_reference


def routing_selector_counts(routing: np.ndarray, experts: int) -> np.ndarray:
    """Tokens routed to each expert."""
    return np.bincount(routing.reshape(-1)[routing.reshape(-1) >= 0], minlength=experts)


def moe_graph(batch, experts, top_k, hidden, inter, tile_inter, dt="fp32", tiling="dynamic", tile=None,
              experts_per_region=1, name=None) -> Graph:
    """The MoE layer graph. Routing rows come from the interpreter stream ``routing``."""
    dt = make_dtype(dt)
    if tiling not in ("static", "dynamic"):
        raise ValueError(f"tiling must be 'static' or 'dynamic', got {tiling!r}")
    if tiling == "static" and not tile:
        raise ValueError("static tiling needs a tile size (tile=...)")
    if inter % tile_inter:
        raise ValueError(f"tile_inter {tile_inter} does not divide inter {inter}")
    if experts % experts_per_region:
        raise ValueError(f"experts_per_region {experts_per_region} does not divide {experts} experts")
    E, H, I, ti, ni = experts, hidden, inter, tile_inter, inter // tile_inter
    g = Graph(name or f"moe_{tiling}" + (f"_t{tile}" if tiling == "static" else "")
              + (f"_tm{experts_per_region}" if experts_per_region > 1 else ""))
    g.tensor("x", batch, H, dt)
    g.tensor("W1", E * H, I, dt)
    g.tensor("W3", E * H, I, dt)
    g.tensor("W2", E * I, H, dt)
    g.tensor("gates", batch, top_k, dt)
    g.tensor("y", batch, H, dt)

    rows = g.load("x", tile=(1, H), out_shape=[batch], stride=[1], name="load_x")
    sel_route, sel_merge = g.broadcast(g.selector_source(E, data="routing", length=batch, name="routing", k=top_k),
                                       2, name="bcast_routing")
    per_expert = g.partition(rows, sel_route, E, rank=0, name="route")

    # pack each expert's rows into token tiles
    tiles, pads = [], []
    for e, stream in enumerate(per_expert):
        if tiling == "static":
            chunks, pad = g.reshape(stream, 0, tile, pad=0, name=f"e{e}_chunk")
            tiles.append(g.accum(chunks, "retile_row", fn("zeros", rows=0, cols=H, dtype=dt.name), 1,
                                 name=f"e{e}_pack"))
            pads.append(pad)
        else:
            tiles.append(g.accum(g.promote(stream, name=f"e{e}_promote"), "retile_row",
                                 fn("zeros", rows=0, cols=H, dtype=dt.name), 1, name=f"e{e}_pack"))
            pads.append(None)
    rows_t = tile if tiling == "static" else None

    outs = [None] * E
    gsize = experts_per_region
    for r in range(E // gsize):
        members = list(range(r * gsize, (r + 1) * gsize))
        if gsize == 1:
            e = members[0]
            xt, ref = g.broadcast(tiles[e], 2, name=f"e{e}_bcast_tiles")
            refs = g.broadcast(ref, 3, name=f"e{e}_bcast_ref")
            w = [g.load(t, tile=s, out_shape=[ni], stride=[0, 1], ref=rf, base=e * ni, name=f"e{e}_load_{t.lower()}")
                 for t, s, rf in (("W1", (H, ti), refs[0]), ("W3", (H, ti), refs[1]), ("W2", (ti, H), refs[2]))]
            xr = g.repeat(xt, ni, name=f"e{e}_repeat_x")
            outs[e] = ffn_core(g, xr, *w, dt, _rows(rows_t, e), H, prefix=f"e{e}_")
            continue
        p = f"r{r}_"
        merged, msel = g.eager_merge([tiles[e] for e in members], rank=0, name=p + "merge")
        sel_a, sel_b = g.broadcast(msel, 2, name=p + "bcast_sel")
        base = g.map(g.map(sel_a, "sel_index", name=p + "expert"), fn("affine", scale=ni, offset=r * gsize * ni),
                     name=p + "weight_base")
        bases = g.broadcast(base, 3, name=p + "bcast_base")
        w = [g.random_load(g.flat_map(b, fn("range", count=ni), name=f"{p}addr_{t.lower()}"), t, tile=s,
                           name=f"{p}load_{t.lower()}")
             for t, s, b in (("W1", (H, ti), bases[0]), ("W3", (H, ti), bases[1]), ("W2", (ti, H), bases[2]))]
        xr = g.repeat(merged, ni, name=p + "repeat_x")
        out = ffn_core(g, xr, *w, dt, rows_t if rows_t else _merged_rows(merged), H, prefix=p)
        back = g.partition(out, sel_b, gsize, rank=0, name=p + "unmerge")
        for e, s in zip(members, back):
            outs[e] = s

    # unpack rows, drop padding, recombine per token
    expert_rows = []
    for e in range(E):
        unpacked = g.flat_map(outs[e], "retile_streamify", name=f"e{e}_unpack")
        if tiling == "static":
            keep = g.map(pads[e], "keep_if_zero", name=f"e{e}_keep")
            unpacked = g.partition(unpacked, keep, 1, rank=0, name=f"e{e}_unpad")[0]
        else:
            unpacked = g.flatten(unpacked, 0, 1, name=f"e{e}_rows")
        expert_rows.append(unpacked)
    gathered = g.reassemble(expert_rows, sel_merge, rank=0, k=top_k, name="combine")
    gates = g.load("gates", tile=(1, 1), out_shape=[batch, top_k], stride=[top_k, 1], name="load_gates")
    weighted = g.map([gathered, gates], "mul", name="weight")
    if dt.is_int:
        weighted = g.map(weighted, int_fns(dt)["q"], name="weight_requant")
    acc_t = "int32" if dt.is_int else "fp32"
    y = g.accum(weighted, "add", fn("zeros", rows=1, cols=H, dtype=acc_t), 1, name="sum_experts")
    if dt.is_int:
        y = g.map(y, fn("requantize", shift=0, dtype=dt.name), name="out_saturate")
    elif dt.name != "fp32":
        y = g.map(y, fn("convert", dtype=dt.name), name="out_round")    # the sum in fp32, rounded once
    g.store(y, "y", tile=(1, H), name="store_y")
    return g


def _rows(rows_t, e):
    from ..types import dyn
    return rows_t if rows_t else dyn(f"route_n{e}")


def _merged_rows(merged):
    return merged.type.dtype.rows


def moe_reference(x, w1, w3, w2, gates, routing, experts, dt: DType) -> np.ndarray:
    """numpy MoE with the graph's arithmetic (bit-exact for integer types)."""
    from ..functions import FUNCTIONS
    B, H = x.shape
    I = w1.shape[1]
    acc = np.zeros((B, H), dtype=np.int64 if dt.is_int else np.float64)
    for t in range(B):
        chosen = sorted(int(c) for c in routing[t] if c >= 0)
        for j, e in enumerate(chosen):
            row = swiglu_reference(x[t:t + 1], w1[e * H:(e + 1) * H], w3[e * H:(e + 1) * H],
                                   w2[e * I:(e + 1) * I], dt)
            if dt.is_int:
                prod = FUNCTIONS["mul"].apply(fn("mul"), row, gates[t:t + 1, j:j + 1])
                acc[t] += FUNCTIONS["requantize"].apply(int_fns(dt)["q"], prod)[0].astype(np.int64)
            else:
                acc[t] += row[0].astype(np.float64) * float(gates[t, j])
    if dt.is_int:
        from ..functions import saturate, wrap_int32
        return saturate(wrap_int32(acc), dt)
    return acc.astype(np.float32)


def moe(routing: np.ndarray, experts: int, hidden=64, inter=128, tile_inter=32, dtype="fp32",
        tiling="dynamic", tile=None, experts_per_region=1, seed=0) -> Workload:
    """MoE workload around a routing table ``[tokens, top_k]`` (e.g. a real trace)."""
    dt = make_dtype(dtype)
    routing = np.asarray(routing)
    B, k = routing.shape
    g = moe_graph(B, experts, k, hidden, inter, tile_inter, dt, tiling, tile, experts_per_region)
    rng = np.random.default_rng(seed)
    x = random_tensor(rng, (B, hidden), dt, 1.0, int_range=256)
    w1 = random_tensor(rng, (experts * hidden, inter), dt, 1 / np.sqrt(hidden), int_range=64)
    w3 = random_tensor(rng, (experts * hidden, inter), dt, 1 / np.sqrt(hidden), int_range=64)
    w2 = random_tensor(rng, (experts * inter, hidden), dt, 1 / np.sqrt(inter), int_range=64)
    gates = (np.abs(random_tensor(rng, (B, k), dt, 0.5, int_range=256))).astype(dt.numpy)
    y = moe_reference(x, w1, w3, w2, gates, routing, experts, dt)
    counts = routing_selector_counts(routing, experts)
    subs = {f"route_n{e}": int(c) for e, c in enumerate(counts)}
    params = dict(batch=B, experts=experts, top_k=k, hidden=hidden, inter=inter, tile_inter=tile_inter,
                  dtype=dt.name, tiling=tiling, tile=tile, experts_per_region=experts_per_region)
    return Workload(g, {"x": x, "W1": w1, "W3": w3, "W2": w2, "gates": gates}, {"routing": routing},
                    {"y": y}, dt, subs=subs, params=params)
