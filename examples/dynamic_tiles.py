"""Dynamic tiling: rows routed to groups, each group's rows packed into one tile of a size known only at run time.

    rows of x ──Partition by a routing selector──> group e's rows (n_e of them: data-dependent)
    group e:  Promote + Accum(retile_row)  ->  one [n_e, H] tile        (pack: the dynamic tile)
              tile @ W_e                   ->  [n_e, H] int32           (W_e loaded once per tile)
              FlatMap(retile_streamify) + Flatten -> its n_e rows again  (unpack)
    Reassemble by the same selector        ->  the rows back in token order, stored as y

On the physical tiles the packed rows are blocks of ``P`` rows with a count, so the matmul runs at the
array's full rate. The selector source declares ``k=1`` (each row goes to one group), which bounds the rows the
groups get together by the row count (``step_hdl/counts.py``). A *tile pool* (``mapper/pools.py``) turns such
a bound into on-chip memory: buffers that re-read a dynamic tile linearly (a repeat, or once per element of a
ref: the MoE layer's expert tile, re-read once per intermediate tile) share pages sized by the bound instead of
each being sized for every row. Here no buffer reads a group's tile that way (the matmul's own operand buffer
reads it block by block), so there is no pool, and the example says so; with ``k`` left out there would be no
bound and no pool either. Run ``python examples/dynamic_tiles.py --help``.
"""

import argparse

import numpy as np

from step_hdl import Graph, fn
from step_hdl.flow import model, prepare, run_rtl, workload


def grouped_graph(tokens: int, hidden: int, groups: int) -> Graph:
    g = Graph("dynamic_tiles")
    g.tensor("x", tokens, hidden, "int16")
    g.tensor("W", groups * hidden, hidden, "int16")
    g.tensor("y", tokens, hidden, "int32")
    rows = g.load("x", tile=(1, hidden), out_shape=[tokens], stride=[1], name="load_x")
    route, gather = g.broadcast(g.selector_source(groups, data="group", length=tokens, k=1, name="group"), 2,
                                name="bcast_group")
    back = []
    for e, part in enumerate(g.partition(rows, route, groups, rank=0, name="route")):
        # all of the group's rows in one tile: [n_e, hidden], n_e a symbol of the Partition (route_n<e>)
        tile = g.accum(g.promote(part, name=f"g{e}_promote"), "retile_row",
                       fn("zeros", rows=0, cols=hidden, dtype="int16"), 1, name=f"g{e}_pack")
        xt, ref = g.broadcast(tile, 2, name=f"g{e}_split")
        w = g.load("W", tile=(hidden, hidden), out_shape=[], stride=[0], ref=ref, base=e, name=f"g{e}_load_w")
        out = g.map([xt, w], "matmul", name=f"g{e}_matmul")
        unpacked = g.flat_map(out, "retile_streamify", name=f"g{e}_unpack")
        back.append(g.flatten(unpacked, 0, 1, name=f"g{e}_rows"))
    g.store(g.reassemble(back, gather, rank=0, k=1, name="combine"), "y", tile=(1, hidden), name="store_y")
    return g


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=12, help="rows of x (default: 12)")
    ap.add_argument("--hidden", type=int, default=8, help="columns of x and W's blocks (default: 8)")
    ap.add_argument("--groups", type=int, default=3, help="groups the rows are routed to (default: 3)")
    ap.add_argument("--backend", default="amaranth", choices=("amaranth", "verilator", "icarus"),
                    help="RTL simulator (default: amaranth)")
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    x = rng.integers(-8, 8, (a.tokens, a.hidden)).astype(np.int16)
    w = rng.integers(-8, 8, (a.groups * a.hidden, a.hidden)).astype(np.int16)
    group = rng.integers(0, a.groups, a.tokens)
    want = np.stack([x[t].astype(np.int64) @ w[group[t] * a.hidden:(group[t] + 1) * a.hidden] for t in range(a.tokens)])
    # the selector source's data: each row's choice of group (a [tokens, k] table, as an MoE's routing)
    wl = workload(grouped_graph(a.tokens, a.hidden, a.groups), {"x": x, "W": w}, {"group": group.reshape(-1, 1)},
                  expected={"y": want.astype(np.int32)})
    prep = prepare(wl, 4)
    res = run_rtl(prep, a.backend)
    counts = np.bincount(group, minlength=a.groups)
    pools = ", ".join(f"{p['name']} ({len(p['buffers'])} buffers, {p['pages']} pages)" for p in prep.program.pools)
    print(f"dynamic tiles of {', '.join(map(str, counts))} rows: RTL {res.cycles:,} cycles ({a.backend}), outputs "
          f"{'match' if res.outputs_match else 'DIFFER: ' + str(res.mismatches)}; model "
          f"{model(wl, lowered=prep.lowered).cycles:,} cycles; tile pools: {pools or 'none'}")
    return 0 if res.outputs_match else 1


if __name__ == "__main__":
    raise SystemExit(main())
