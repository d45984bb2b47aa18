"""A small Mixture-of-Experts layer with static token tiles, top-1 routing:

    each token row of x goes to one expert (a routing table);
    each expert packs its rows into tiles of ``tile`` rows (the last one padded),
    computes relu(requantize(tile @ W_e, 6)) and unpacks the rows, dropping padding;
    the rows are put back in token order.

The routing table is stream data (a SelectorSource), the experts' weights one
stacked ``[E·H, O]`` tensor, each expert loading its own ``[H, O]`` block once
per token tile. Token tiles of 6 rows are not a multiple of the 4x4 physical
tile, so they lower to rows of ``[1, 4]`` tiles. Run ``python
examples/moe_static.py --help``.
"""

import argparse

import numpy as np

from step_hdl import Graph, fn
from step_hdl.flow import model, prepare, run_rtl, workload

SHIFT = 6


def moe_graph(tokens: int, experts: int, hidden: int, d_out: int, tile: int) -> Graph:
    g = Graph("moe_static")
    g.tensor("x", tokens, hidden, "int16")
    g.tensor("w", experts * hidden, d_out, "int16")
    g.tensor("y", tokens, d_out, "int16")
    rows = g.load("x", tile=(1, hidden), out_shape=[tokens], stride=[1], name="load_x")
    route, combine = g.broadcast(g.selector_source(experts, data="routing", length=tokens, name="routing"), 2,
                                 name="split_routing")
    back = []
    for e, mine in enumerate(g.partition(rows, route, experts, name="route")):
        chunks, pad = g.reshape(mine, 0, tile, pad=0, name=f"e{e}_chunk")
        tiles = g.accum(chunks, "retile_row", fn("zeros", rows=0, cols=hidden, dtype="int16"), 1,
                        name=f"e{e}_pack")
        x_t, ref = g.broadcast(tiles, 2, name=f"e{e}_split")
        w = g.load("w", tile=(hidden, d_out), out_shape=[], stride=[0], ref=ref, base=e, name=f"e{e}_load_w")
        h = g.map(g.map([x_t, w], "matmul", name=f"e{e}_mm"), fn("requantize", shift=SHIFT, dtype="int16"),
                  name=f"e{e}_q")
        out_rows = g.flat_map(g.map(h, "relu", name=f"e{e}_act"), "retile_streamify", name=f"e{e}_unpack")
        keep = g.map(pad, "keep_if_zero", name=f"e{e}_keep")
        back.append(g.partition(out_rows, keep, 1, name=f"e{e}_unpad")[0])
    y = g.flatten(g.reassemble(back, combine, k=1, name="combine"), 0, 1, name="rows")
    g.store(y, "y", tile=(1, d_out), name="store_y")
    return g


def reference(x, w, routing, experts) -> np.ndarray:
    hidden = x.shape[1]
    y = np.zeros((x.shape[0], w.shape[1]), np.int16)
    for t, e in enumerate(routing[:, 0]):
        acc = x[t].astype(np.int64) @ w[e * hidden:(e + 1) * hidden]
        y[t] = np.maximum(np.clip(acc >> SHIFT, -32768, 32767), 0)
    return y


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=24, help="tokens (default: 24)")
    ap.add_argument("--experts", type=int, default=4, help="experts (default: 4)")
    ap.add_argument("--hidden", type=int, default=8, help="hidden size H (default: 8)")
    ap.add_argument("--d-out", type=int, default=8, help="output size O (default: 8)")
    ap.add_argument("--tile", type=int, default=6, help="static token tile in rows (default: 6)")
    ap.add_argument("--phys-tile", type=int, default=4, help="physical tile side (default: 4)")
    ap.add_argument("--backend", default="amaranth", choices=("amaranth", "verilator", "icarus"),
                    help="RTL simulator (default: amaranth)")
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    x = rng.integers(-100, 100, (a.tokens, a.hidden)).astype(np.int16)
    w = rng.integers(-20, 20, (a.experts * a.hidden, a.d_out)).astype(np.int16)
    routing = rng.integers(0, a.experts, (a.tokens, 1))
    wl = workload(moe_graph(a.tokens, a.experts, a.hidden, a.d_out, a.tile), {"x": x, "w": w},
                  {"routing": routing}, expected={"y": reference(x, w, routing, a.experts)})
    assert wl.mismatches(wl.run()) == {}, "the interpreter disagrees with numpy"
    prep = prepare(wl, a.phys_tile)
    res = run_rtl(prep, a.backend)
    counts = np.bincount(routing[:, 0], minlength=a.experts)
    print(f"moe {a.tokens} tokens over {a.experts} experts ({', '.join(map(str, counts))} rows), tiles of "
          f"{a.tile}: {len(prep.design.units)} units, RTL {res.cycles:,} cycles ({a.backend}), outputs "
          f"{'match' if res.outputs_match else 'DIFFER: ' + str(res.mismatches)}; model "
          f"{model(wl, lowered=prep.lowered).cycles:,} cycles")
    return 0 if res.outputs_match else 1


if __name__ == "__main__":
    raise SystemExit(main())
