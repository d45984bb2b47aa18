"""flow.compare: statistics, the `step-hdl compare` command, and the model against measured RTL cycles."""

import json
from pathlib import Path

import numpy as np
import pytest

from step_hdl.flow.cli import main
from step_hdl.flow.compare import (SWEEPS, CompareError, Point, compare, load_rtl_json, mape, model_cycles,
                                  paper_points, pearson, point_workload, swiglu_points, workload_label)

# SwiGLU B=64 H=256 I=512 int16 on 16x16 physical tiles, DRAM preset 'paper', every point bit-exact
# (Verilator, 2026-12-02: MatMul units summing their k-runs, on-chip buffers that stream; `step-hdl compare
# swiglu` measures the sweep again).
# (tile_b, tile_inter) -> cycles
RTL_SWIGLU_16 = {
    (16, 16): 16660, (16, 32): 14612, (16, 64): 13616, (16, 128): 13164, (16, 256): 13028,
    (32, 16): 10545, (32, 32): 8507, (32, 64): 7543, (32, 128): 7153, (32, 256): 7143,
    (64, 16): 7473, (64, 32): 5540, (64, 64): 4713, (64, 128): 4423, (64, 256): 4766,
}


def _pts(cycles: dict, size=(32, 64, 64), tile=16):
    """Results in measure_points' form from ``{(tile_b, tile_inter): cycles}``."""
    B, H, I = size
    return [{"workload": "swiglu", "params": {"batch": B, "hidden": H, "inter": I, "tile-b": tb, "tile-inter": ti},
             "tile": tile, "dram": "paper", "group": "g", "rtl_cycles": c, "outputs_match": True}
            for (tb, ti), c in cycles.items()]


def test_statistics_on_known_numbers():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert np.isnan(pearson([1, 1, 1], [1, 2, 3]))
    assert mape([100, 200], [110, 180]) == pytest.approx(10.0)
    pts = _pts({(1, 1): 100, (1, 2): 200, (2, 1): 400})
    model = {(1, 1): 105, (1, 2): 190, (2, 1): 480}
    c = compare(pts, lambda r: model[r["params"]["tile-b"], r["params"]["tile-inter"]])
    assert [p["error_pct"] for p in c.points] == pytest.approx([5.0, -5.0, 20.0])
    assert c.mape == pytest.approx(10.0)
    assert c.pearson == pytest.approx(np.corrcoef([100, 200, 400], [105, 190, 480])[0, 1])
    assert c.worst["params"]["tile-b"] == 2 and c.worst["error_pct"] == pytest.approx(20.0)
    assert c.per_workload["swiglu"]["points"] == 3


@pytest.mark.parametrize("bad, msg", [
    ([], "RTL results: no measured points"),
    (_pts({(1, 1): 100}) + _pts({(1, 1): 100}), r"points 0 and 1 are the same configuration \(swiglu batch=32 "
                                                r"hidden=64 inter=64 tile-b=1 tile-inter=1 P=16 paper\), duplicated: "
                                                r"100 and 100 cycles"),
    (_pts({(1, 1): 100}) + _pts({(1, 1): 120}), "contradictory: 100 and 120 cycles"),
    ([{**_pts({(1, 1): 100})[0], "rtl_cycles": 0}], r"point 0 \(.*\): rtl_cycles must be a positive integer, got 0"),
    ([{**_pts({(1, 1): 100})[0], "outputs_match": False}], "its RTL outputs differ from the interpreter"),
    ([{"workload": "conv"}], "point 0: unknown workload 'conv'; workloads: swiglu, moe, gqa"),
])
def test_bad_measurements_are_refused(bad, msg):
    with pytest.raises(CompareError, match=msg):
        compare(bad, lambda r: 1)


def test_load_rtl_json_accepts_every_form(tmp_path):
    new = _pts({(4, 4): 7})
    (tmp_path / "b.json").write_text(json.dumps(new))
    (tmp_path / "c.json").write_text(json.dumps({"points": new}))
    assert load_rtl_json(tmp_path / "b.json") == load_rtl_json(tmp_path / "c.json") == new
    (tmp_path / "d.json").write_text(json.dumps({"other": 1}))
    with pytest.raises(CompareError, match="expected a list of points or an object with a 'points' list"):
        load_rtl_json(tmp_path / "d.json")
    (tmp_path / "e.json").write_text("[{")
    with pytest.raises(CompareError, match="e.json is not valid JSON"):
        load_rtl_json(tmp_path / "e.json")


def test_cli_compare_on_fabricated_rtl(tmp_path, capsys):
    # a small SwiGLU (B=32 H=64 I=64) on 16x16 tiles; the 'RTL' cycles are made up
    pts = _pts({(16, 16): 1000, (32, 32): 600, (16, 64): 700})
    path = tmp_path / "rtl.json"
    path.write_text(json.dumps(pts))
    args = ["compare", "swiglu", "--rtl-json", str(path), "--size", "32", "64", "64"]
    assert main(args + ["--json", "--plot", str(tmp_path / "cmp.png")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["rtl_cycles"] for p in out["points"]] == [p["rtl_cycles"] for p in pts]
    want = [model_cycles(p) for p in pts]
    assert [p["model_cycles"] for p in out["points"]] == want
    assert out["mape_pct"] == pytest.approx(mape([p["rtl_cycles"] for p in pts], want), rel=1e-5)
    assert -1 <= out["pearson"] <= 1
    assert (tmp_path / "cmp.png").stat().st_size > 0
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "rtl_cycles" in text and "pearson" in text and "mean error" in text


def test_cli_compare_refuses_points_of_another_workload_or_preset(tmp_path, capsys):
    path = tmp_path / "rtl.json"
    path.write_text(json.dumps(_pts({(4, 4): 100})))
    assert main(["compare", "gqa", "--rtl-json", str(path)]) == 2
    assert "point 0 is a swiglu point (swiglu batch=32" in capsys.readouterr().err
    assert main(["compare", "swiglu", "--rtl-json", str(path), "--dram", "paper-studies"]) == 2
    assert "was measured with DRAM preset 'paper', not --dram 'paper-studies'" in capsys.readouterr().err
    path.write_text("[]")
    assert main(["compare", "swiglu", "--rtl-json", str(path)]) == 2
    assert "no measured points" in capsys.readouterr().err


def test_compare_without_rtl_json_runs_the_rtl_sweep(capsys, monkeypatch, tmp_path):
    """Without --rtl-json, compare runs the RTL itself (here stubbed: the real sweeps take minutes)."""
    from step_hdl.flow.sweep import compare as cmp_mod
    assert paper_points(tile=4)[:2] == [(4, 4), (4, 8)] and len(paper_points()) == 15
    seen = {}

    def fake(points, backend, progress=False):
        seen.update(n=len(points), tile=points[0].tile, backend=backend, params=points[0].params)
        return [{**p.to_json(), "rtl_cycles": 1000 + 10 * k, "outputs_match": True} for k, p in enumerate(points[:2])]
    monkeypatch.setattr(cmp_mod, "measure_points", fake)
    saved = tmp_path / "rtl.json"
    assert main(["compare", "swiglu", "--size", "16", "8", "64", "--phys-tile", "4", "--backend", "amaranth",
                 "--json", "--save-rtl", str(saved)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert seen == {"n": 15, "tile": 4, "backend": "amaranth",
                    "params": {"batch": 16, "hidden": 8, "inter": 64, "tile-b": 4, "tile-inter": 4}}
    assert len(out["points"]) == 2 and len(json.loads(saved.read_text())) == 2


@pytest.mark.parametrize("name, n", [("swiglu", 15), ("swiglu-4", 15), ("moe", 7), ("moe-tm", 3), ("gqa", 3)])
def test_every_workload_has_a_default_sweep_whose_points_build(name, n, routing, kv_files):
    if name.startswith("moe"):
        routing("mixtral_b64")
    if name == "gqa":
        kv_files(16)
    pts = SWEEPS[name]()
    assert len(pts) == n and len({p.key() for p in pts}) == n
    w = point_workload(pts[-1])
    assert w.graph.nodes


# the same sweep at a quarter of the size (B=16 H=64 I=128) on 4x4 tiles, both presets, Verilator, bit-exact:
# `python bench/crossval.py --only swiglu` (2026-12-02)
RTL_SWIGLU_4 = {
    "paper": {(4, 4): 5231, (4, 8): 3777, (4, 16): 2993, (4, 32): 2792, (4, 64): 2883, (8, 4): 3355, (8, 8): 2394,
              (8, 16): 2401, (8, 32): 2506, (8, 64): 2739, (16, 4): 3071, (16, 8): 2428, (16, 16): 2435,
              (16, 32): 2540, (16, 64): 2773},
    "paper-studies": {(4, 4): 4502, (4, 8): 3409, (4, 16): 2932, (4, 32): 2787, (4, 64): 2883, (8, 4): 2499,
                      (8, 8): 2369, (8, 16): 2399, (8, 32): 2506, (8, 64): 2739, (16, 4): 2516, (16, 8): 2403,
                      (16, 16): 2433, (16, 32): 2539, (16, 64): 2773}}
#: the weight column tiles of tile_inter 4 and 8 on the 8-channel preset, 16 runs of one block 1 KB apart, every
#: one on the same channel, where the model is up to 11 % fast (see test_one_channel_weight_columns...)
ONE_CHANNEL = {("paper", 4, 4), ("paper", 4, 8), ("paper", 8, 4), ("paper", 16, 4)}


def _quarter(dram):
    return [{**p.to_json(), "rtl_cycles": RTL_SWIGLU_4[dram][p.params["tile-b"], p.params["tile-inter"]]}
            for p in swiglu_points((16, 64, 128), 4, dram)]


@pytest.mark.parametrize("dram", ["paper", "paper-studies"])
def test_model_tracks_rtl_quarter_size_sweep(dram):
    """Every point of the quarter-size sweep but the one-channel ones within 7 %, on average within 3.5 %. A
    weight tile of 128 physical tiles (4 x 32: [64, 32]) is more than a load's 64 credits; the RTL walks on
    into the next tile as the pieces of the one being sent leave and return their credits, and so does the
    model (it was +24 % when it issued such a tile only after the one before had left); it issues the pieces
    beyond the credits a round trip after the first ones leave (+5.8 % at 4 x 32, +6.2 % at 4 x 64)."""
    c = compare(_quarter(dram))
    bad = [(p["params"]["tile-b"], p["params"]["tile-inter"], p["error_pct"]) for p in c.points
           if abs(p["error_pct"]) > 7 and (dram, p["params"]["tile-b"], p["params"]["tile-inter"]) not in ONE_CHANNEL]
    assert not bad, bad
    rest = [p for p in c.points if (dram, p["params"]["tile-b"], p["params"]["tile-inter"]) not in ONE_CHANNEL]
    # (their cycles span a narrow range, 2,394 to 3,355, where Pearson says little: the mean error does;
    # measured 3.0 % on `paper`, 2.7 % on `paper-studies`)
    assert mape([p["rtl_cycles"] for p in rest], [p["model_cycles"] for p in rest]) <= 3.5


@pytest.mark.xfail(strict=True, reason="two loads on one channel, lockstep or a channel pair apart: the point sits "
                                       "where the two regimes meet, and a few cycles decide which; the model's "
                                       "boundary is two credits from the RTL's (docs/crossval.md, bench/credits.py)")
def test_one_channel_weight_columns_within_10_percent():
    """W1's and W3's [64, 4] column tiles (tile_inter = P) lie 16 KB apart, column c of both on channel
    c // 2 % 8. Measured at 4 x 4 (RTL memory-port handshakes from a waveform, the model's DRAM accesses
    logged), both reach the same steady state, a tile every 34.5 cycles per load with W3 a channel pair behind
    W1; the RTL starts the two in lockstep (the channel serves the ports in turn: first tiles complete at 132
    and 140) and W3 drifts behind over 88 tiles, the model separates them at the first tile (104 and 168):
    W1 reaches tile 88 at 3,588 cycles in RTL and 3,000 in the model, the point's 564 cycles (5,231 against
    4,667, -10.8 %). With 128 credits the RTL takes 4,398 cycles and the model 4,405. Booking the first
    cycle's blocks in the RTL's order makes it +16.8 % (the loads then stay together too long), and the RTL
    itself takes 6,302 cycles at 62 credits and 4,983 at 65 (bench/credits.py)."""
    c = compare(_quarter("paper"))
    assert all(abs(p["error_pct"]) <= 10 for p in c.points)


def test_model_tracks_rtl_swiglu_paper_sweep():
    # the memory-system issue's target: pearson >= 0.995, MAPE <= 3 %; and every point within 10 %
    pts = [{**p.to_json(), "rtl_cycles": RTL_SWIGLU_16[p.params["tile-b"], p.params["tile-inter"]]}
           for p in swiglu_points()]
    c = compare(pts)
    bad = [(p["params"]["tile-b"], p["params"]["tile-inter"], p["error_pct"]) for p in c.points
           if abs(p["error_pct"]) > 10]
    assert not bad, f"model off by more than 10 %: {bad}; pearson {c.pearson:.3f}, mape {c.mape:.1f} %"
    assert c.pearson >= 0.995 and c.mape <= 3, f"pearson {c.pearson:.4f}, mape {c.mape:.2f} %"


def test_crossval_bench_on_fabricated_rtl(tmp_path, capsys):
    """bench/crossval.py compares measured results without running RTL (--rtl-json) and writes the JSON the
    issue asks for: every point with its parameters, and the statistics over all and per workload."""
    import importlib
    import sys as _sys
    from pathlib import Path
    bench = Path(__file__).resolve().parents[1] / "bench"
    _sys.path.insert(0, str(bench))
    try:
        cv = importlib.import_module("crossval")
    finally:
        _sys.path.remove(str(bench))
    assert len(cv.POINTS) >= 40 and {p.dram for p in cv.POINTS} == {"paper", "paper-studies"}
    assert {p.tile for p in cv.POINTS} == {4, 16} and len({p.key() for p in cv.POINTS}) == len(cv.POINTS)
    pts = _pts({(4, 4): 400, (8, 16): 300}, size=(16, 8, 64), tile=4)
    (tmp_path / "rtl.json").write_text(json.dumps(pts))
    out = tmp_path / "cv.json"
    assert cv.main(["--rtl-json", str(tmp_path / "rtl.json"), "--json", str(out), "--plot",
                    str(tmp_path / "cv.png")]) == 0
    res = json.loads(out.read_text())
    assert {"points", "pearson", "mape_pct", "worst_pct", "per_workload"} <= set(res)
    p = res["points"][0]
    assert (p["workload"], p["tile-b"], p["tile-inter"], p["rtl_cycles"]) == ("swiglu", 4, 4, 400)
    assert p["model_cycles"] == model_cycles(pts[0]) and (tmp_path / "cv.png").stat().st_size > 0
    (tmp_path / "dup.json").write_text(json.dumps(pts + pts[:1]))
    assert cv.main(["--rtl-json", str(tmp_path / "dup.json")]) == 2
    assert "points 0 and 2 are the same configuration" in capsys.readouterr().err


# GQA decode, b16 trace 3 (KV lengths / 64), 4 regions, G = d = 4, int16, 4x4, paper, Verilator, bit-exact:
# on blocks of P KV rows: `python bench/crossval.py` (its cache of measured points, 2026-12-03)
RTL_GQA = {"interleaved": 412, "contiguous": 396, "dynamic": 665}


def test_model_tracks_gqa_strategies(kv_files):
    """Within 8 % on each strategy (measured +0.2 / +7.6 / +6.3 %: the model is high where a region's KV
    blocks follow one another without a gap), the dynamic one too: its regions take a new item only when one of their
    two has been stored and acknowledged, so the dispatch loop's round trip sets its pace. The model counts
    the pipeline cycles of the units each node is lowered to (a FIFO into each unit after the first and every
    unit's declared latency: softmax's shift, 12; the matmul of the scores, 7; a KV-row load, 2; exp, a Map,
    1), starts a unit on the first row a unit upstream passes on, issues a request when its address is
    whole and acknowledges a store a round trip after its data is in, and lays the tensors out where the RTL
    does (before all this: interleaved / contiguous / dynamic +6.2 / +4.3 / -7.2 %, by errors that cancelled
    out: K and V rows on one channel, store acknowledgements before their data)."""
    from step_hdl.mapper.latency import chain_latency
    from step_hdl.mapper.tiling import tile_physical
    kv_files(16)
    pts = [{**p.to_json(), "rtl_cycles": RTL_GQA[p.params["strategy"]]} for p in SWEEPS["gqa"]()]
    c = compare(pts)
    assert all(abs(p["error_pct"]) <= 8 for p in c.points), [(p["params"]["strategy"], p["error_pct"])
                                                             for p in c.points]
    cycles = chain_latency(tile_physical(point_workload(SWEEPS["gqa"]()[2]).graph, 4))
    assert (cycles["r0_shift"], cycles["r0_scores"], cycles["r0_load_k"], cycles["r0_exp"]) == (12, 7, 2, 1)


def test_crossval_effects_from_compared_points():
    """bench/crossval.py's study effects: static tile over dynamic, 2 and 4 experts per region over 1, the
    better static schedule over dynamic, in RTL and in the model, per preset."""
    import importlib
    import sys as _sys
    from pathlib import Path
    bench = Path(__file__).resolve().parents[1] / "bench"
    _sys.path.insert(0, str(bench))
    try:
        cv = importlib.import_module("crossval")
    finally:
        _sys.path.remove(str(bench))

    def pt(workload, rtl, model, **params):
        return {"workload": workload, "params": params, "dram": "paper", "rtl_cycles": rtl, "model_cycles": model}
    moe = dict(trace="mixtral_b64", hidden=16)
    pts = [pt("moe", 100, 110, tiling="dynamic", **moe), pt("moe", 80, 77, tiling="static", tile=3, **moe),
           pt("moe", 50, 50, hidden=4, **{"experts-per-region": 1}),
           pt("moe", 60, 66, hidden=4, **{"experts-per-region": 4}),
           pt("gqa", 40, 40, batch=16, scale=64, strategy="interleaved"),
           pt("gqa", 30, 33, batch=16, scale=64, strategy="contiguous"),
           pt("gqa", 60, 55, batch=16, scale=64, strategy="dynamic")]
    got = {e["effect"]: (e["rtl"], e["model"], e["gap_pct"]) for e in cv.effects(pts)}
    assert got == {"static 3 / dynamic": (0.8, 0.7, -12.5), "4 per region / 1": (1.2, 1.32, 10.0),
                   "better static / dynamic": (0.5, 0.6, 20.0)}


#: every bench/crossval.py point measured in RTL (Verilator), with the commit it was measured at
#: (`python bench/crossval.py --save-rtl bench/data/crossval-rtl.json`; measure again when a unit's timing changes)
STORED_RTL = Path(__file__).resolve().parents[1] / "bench" / "data" / "crossval-rtl.json"


def test_model_tracks_the_stored_rtl_of_every_workload(routing, kv_files):
    """Issue 19's goal on bench/crossval.py's 68 points (SwiGLU at 16x16 and at a quarter size on 4x4, MoE
    static and dynamic, time-multiplexed MoE, GQA decode with each strategy; both DRAM presets), the model
    against RTL results stored in the repository, so that any change of the model is checked against every
    workload in the default suite: Pearson >= 0.99 and mean error <= 5 % over all points and on each workload
    (Pearson where the cycles span more than 2x), every point within 10 % but the one-channel SwiGLU points
    (test_one_channel_weight_columns_within_10_percent: within 11 %)."""
    routing("mixtral_b64")
    kv_files(16)
    stored = json.loads(STORED_RTL.read_text())
    assert stored["backend"] == "verilator" and stored["rtl_commit"]
    results = load_rtl_json(STORED_RTL)
    assert len(results) >= 40 and all(r["outputs_match"] for r in results)
    c = compare(results)
    assert c.pearson >= 0.99 and c.mape <= 5, (c.pearson, c.mape)
    for name, s in c.per_workload.items():
        cycles = [p["rtl_cycles"] for p in c.points if workload_label(p) == name]
        assert s["mape_pct"] <= 5, (name, s)
        assert max(cycles) < 2 * min(cycles) or s["pearson"] >= 0.99, (name, s)

    def one_channel(p):
        q = p["params"]
        return (p["workload"] == "swiglu" and p["tile"] == 4
                and (p["dram"], q["tile-b"], q["tile-inter"]) in ONE_CHANNEL)
    bad = [(Point.from_json(p).label(), p["error_pct"]) for p in c.points
           if abs(p["error_pct"]) > (11 if one_channel(p) else 10)]
    assert not bad, bad
