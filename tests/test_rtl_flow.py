"""The RTL flow end to end: STeP graph -> lowered graph -> top level -> RTL simulation, checked
against the interpreter; off-chip bytes against the symbolic metrics; clear errors."""

import json

import numpy as np
import pytest

from step_hdl import Graph, StepDeadlockError, fn
from step_hdl.mapper.fabric import Fabric, FabricError
from step_hdl.mapper.sizing import fabric_for
from step_hdl.mapper.tiling import TilingError, tile_physical
from step_hdl.mapper.plan import plan
from step_hdl.metrics import metrics
from step_hdl.flow import model, prepare, run_rtl as run, shared_fabric
from step_hdl.sim.fabric import Deadlock
from step_hdl.workloads import swiglu
from step_hdl.workloads.base import Workload
from step_hdl.types import dtype as make_dtype

from helpers import REDUCED, SWEEP


class ModelDisagreement(AssertionError):
    """The model (or a paper effect) is further from the RTL than a test claims: the only failure the strict
    xfails below accept, so a wrong output or a byte count still fails them."""


#: the reduced-size confirmations measured on the per-channel memory system (issue 17), all bit-exact, where
#: the model does not agree as these tests claim; issues 18 (dense tiles), 19 (cross-validation) and 22
#: (latency in the model) are to restore them, and a strict xfail fails the day they hold


def test_reduced_sweep_shares_one_design(reduced_sweep):
    fab, ws, preps = reduced_sweep
    assert len({p.design.key() for p in preps}) == 1
    # the per-program settings differ: one build, fifteen configuration images
    assert len({tuple(p.program.config) for p in preps}) == len(SWEEP)


@pytest.mark.parametrize("point", range(len(SWEEP)), ids=[f"tb{tb}-ti{ti}" for tb, ti in SWEEP])
def test_reduced_sweep_bit_exact_on_verilator(reduced_sweep, point):
    """Every point on one Verilator build (tests/hw/test_backends.py runs a point on all three back-ends)."""
    fab, ws, preps = reduced_sweep
    w, prep = ws[point], preps[point]
    res = run(prep, "verilator")
    assert res.status == "done"
    assert res.outputs_match, res.mismatches
    assert np.array_equal(prep.expected["y"], w.expected["y"])      # the interpreter agrees with numpy
    # every transfer moves whole 4x4 tiles and the logical tiles are multiples of them, so the bytes the
    # RTL counts equal the symbolic traffic exactly (no request-granularity rounding)
    sym = metrics(w.graph).subs(w.subs).offchip_bytes
    assert res.offchip_bytes == int(sym) == prep.reference_bytes
    assert res.bytes_written == REDUCED["batch"] * REDUCED["hidden"] * 2
    assert 0 < res.cycles == res.counters["cycles"]
    util = res.utilization(prep.design)
    assert all(0 <= u["active"] <= 1 and 0 <= u["stalled"] <= 1 for u in util.values())
    # every unit moved a token, the store last: it writes the final tile, then done
    assert all(0 < u["finish"] <= res.cycles for u in util.values())
    assert util["store_y"]["finish"] == max(u["finish"] for u in util.values())


def test_the_fabric_testbench_clock_runs_in_the_simulator(reduced_sweep, monkeypatch):
    """The testbench's clock is cocotb's C++ clock: its default, a Python task, resumed Python at both edges
    of every cycle (the 8-expert MoE fabric ran 1.25x slower with it, the quick start's SwiGLU fabric 2x)."""
    import step_hdl.sim.rtl as rtl
    raw, original = [], rtl.run_cocotb_module

    def keep(*args, **kwargs):
        res, build_s = original(*args, **kwargs)
        raw.append(res)
        return res, build_s

    monkeypatch.setattr(rtl, "run_cocotb_module", keep)
    fab, ws, preps = reduced_sweep
    res = run(preps[0], "verilator")
    assert res.outputs_match and res.cycles > 0
    assert [r["clock"] for r in raw] == ["gpi"]


@pytest.mark.slow      # a 90 s MoE fabric build
def test_a_fabric_build_splits_its_functions_and_compiles_its_slow_files_once(reduced_sweep, monkeypatch,
                                                                               tmp_path):
    """A fabric's Verilator build: generated functions split (sim.rtl.SPLIT_CFUNCS), the files that run once
    unoptimized (OPT_SLOW). Under pgo (Verilator's -O3, the C++ guided by a profile) the first run profiles;
    the rebuild from its profile compiles the optimized files only, and the next run, on the rebuilt
    simulator, gives the same cycles and outputs."""
    from step_hdl.sim.rtl import OPT_SLOW, SPLIT_CFUNCS
    monkeypatch.setenv("STEP_HDL_BUILD", str(tmp_path))
    monkeypatch.setenv("STEP_HDL_VERILATOR_OPT", "pgo")
    fab, ws, preps = reduced_sweep
    first = run(preps[0], "verilator")
    assert first.outputs_match and first.cycles > 0
    bdir = next(tmp_path.glob("*-verilator-*"))
    command = next(ln for ln in (bdir / "Vtop__verFiles.dat").read_text().splitlines() if ln.startswith("C "))
    assert f" --output-split-cfuncs {SPLIT_CFUNCS} " in command and " -O3 " in command   # pgo builds on -O3

    def compiles(log):      # {generated C++ file: its compile command}
        return {ln.split()[-1]: ln for ln in (bdir / log).read_text().splitlines()
                if ln.startswith("c++ ") and " -c " in ln and ln.split()[-1].startswith("Vtop")}
    built, rebuilt = compiles("build.log"), compiles("pgo.log")
    slow = {f for f in built if f.endswith("__Slow.cpp")}
    assert slow and len(built) > len(slow)          # a build of several files, the slow ones apart
    assert all(f" {OPT_SLOW} " in built[f] and "-fprofile" not in built[f] for f in slow)
    assert all("-fprofile-generate" in c for f, c in built.items() if f not in slow)
    assert set(rebuilt) == set(built) - slow and all("-fprofile-use" in c for c in rebuilt.values())
    simulator = bdir / bdir.name.split("-verilator-")[0]     # the runner names it after the top level
    stamp = simulator.stat().st_mtime
    again = run(preps[0], "verilator")
    assert (again.cycles, again.outputs_match) == (first.cycles, True) and simulator.stat().st_mtime == stamp


def test_model_tracks_rtl_reduced_sweep(reduced_sweep):
    """The memory-system issue's target on the small 4x4-tile sweep: the model's mean error <= 5 %, no point
    beyond 10 % (measured 2026-12-03, the loads' order queue and partial reads: mean 2.3 %, worst -5.8 % at
    4 x 4; 2026-12-02, MatMul units and bursts: mean 1.2 %, worst +3.9 % at 8 x 4; 2026-12-01: mean 3.8 %,
    worst -6.0 %)."""
    fab, ws, preps = reduced_sweep
    errors = {pt: model(w, fab).cycles / run(prep, "verilator").cycles - 1
              for pt, w, prep in zip(SWEEP, ws, preps)}
    worst = max(errors, key=lambda pt: abs(errors[pt]))
    assert np.mean(np.abs(list(errors.values()))) <= 0.05 and abs(errors[worst]) <= 0.10, errors


def test_graph_that_does_not_fit_the_fabric():
    w = swiglu(8, 16, 32, 8, 16, "int16")
    small = Fabric(tile=4, units={"Map": 2}, map_functions=("matmul", "mul", "requantize", "silu"))
    with pytest.raises(FabricError, match=r"needs 6 Map unit\(s\) \(gate_requant, .*\); the fabric has 2\n"
                                         r"  the graph needs 3 MatMul unit\(s\) \(gate_proj, up_proj, down_proj\)"):
        prepare(w, small)
    import dataclasses
    shallow = dataclasses.replace(fabric_for(tile_physical(w.graph, 4), 4, "int16"), max_rank=2)
    with pytest.raises(FabricError, match="LinearOffChipLoad 'load_x': its unit cannot be configured for it on "
                                          "this fabric: LinearOffChipLoad: 0 ref \\+ 4 out dimensions do not fit "
                                          "max_dims 3 / max_rank 2"):
        prepare(w, shallow)


def test_unsupported_function_and_operator_are_named():
    w = swiglu(8, 16, 32, 8, 16, "int16")
    fab = shared_fabric([w], 4, map_functions=("matmul", "mul", "requantize"))
    with pytest.raises(FabricError, match="Map 'silu' needs function 'silu'; the fabric's Map units support "
                                          "matmul, mul, requantize"):
        prepare(w, fab)
    g = Graph("pair")                   # already in physical tiles: [1, 1] scalars
    g.tensor("a", 4, 1, "int32")
    g.tensor("b", 4, 2, "int32")
    x, y = g.broadcast(g.load("a", tile=(1, 1), out_shape=[4], stride=[1], name="load_a"), 2, name="fan")
    g.store(g.map([x, y], "pair", name="pairs"), "b", tile=(1, 2), name="store_b")
    with pytest.raises(FabricError, match="Map 'pairs': function 'pair' has no hardware implementation"):
        plan(g, fabric_for(g, 4, "int32"))
    g = Graph("exp32")
    g.tensor("a", 4, 16, "fp32")
    g.tensor("b", 4, 16, "fp32")
    g.store(g.map(g.load("a", tile=(4, 4), out_shape=[4], stride=[1], name="load_a"), "exp", name="e"), "b",
            tile=(4, 4), name="store_b")
    with pytest.raises(FabricError, match="Map 'e': no unit can run it on this fabric: MapParams: function 'exp' on "
                                          "fp32 tiles has no hardware \\(it builds bf16 floats\\)"):
        prepare(Workload(g, {"a": np.ones((4, 16), np.float32)}, {}, {}, make_dtype("fp32")), 4)
    g = Graph("out")
    g.tensor("a", 8, 8, "int16")
    g.output(g.load("a", tile=(4, 4), out_shape=[2, 2], stride=[2, 1], name="load_a"), name="o")
    with pytest.raises(FabricError, match="Output 'o': streams of data tiles leaving the fabric are not supported "
                                          "by the top level .*; store results with a LinearOffChipStore"):
        prepare(Workload(g, {"a": np.ones((8, 8), np.int16)}, {}, {}, make_dtype("int16")), 4)


def _unbalanced():
    """A fan-out whose paths reconverge unbalanced: the matmul side buffers x's whole row of tiles first."""
    g = Graph("unbalanced")
    g.tensor("x", 4, 32, "int16")
    g.tensor("w", 32, 32, "int16")
    g.tensor("y", 4, 32, "int16")
    x = g.load("x", tile=(4, 32), out_shape=[1], stride=[1], name="load_x")
    w = g.load("w", tile=(32, 32), out_shape=[1], stride=[1], name="load_w")
    direct, other = g.broadcast(x, 2, name="fan")
    q = fn("requantize", shift=6, dtype="int16")
    h = g.map(g.map([other, w], "matmul", name="mm"), q, name="mm_q")
    g.store(g.map(g.map([direct, h], "mul", name="gate"), q, name="gate_q"), "y", tile=(4, 32), name="store_y")
    rng = np.random.default_rng(3)
    t = {"x": rng.integers(-64, 64, (4, 32)).astype(np.int16), "w": rng.integers(-64, 64, (32, 32)).astype(np.int16)}
    from step_hdl.interp import run as interp_run
    return Workload(g, t, {}, {"y": interp_run(g, t).memory["y"]}, make_dtype("int16"))


def test_fifo_depth_of_a_reconvergent_fan_out_avoids_the_deadlock():
    res = run(prepare(_unbalanced(), 4), "amaranth")
    assert res.outputs_match


def test_deadlock_names_the_stuck_channels():
    w = _unbalanced()
    fab = shared_fabric([w], 4, max_fifo_depth=2, chunk_fifo_depth=0)      # (no FIFO sized for the row)
    prep = prepare(w, fab)
    assert {e.label: e.depth for e in prep.design.edges}["fan.out0"] == 2
    with pytest.raises(Deadlock, match=r"(?s)stopped after \d+ cycles \(hung\).*channels holding undelivered "
                                       r"tokens:.*fan\.out0 -> gate\.i0: \d+ token\(s\) not taken") as err:
        run(prep, "amaranth")
    assert isinstance(err.value, StepDeadlockError) and err.value.pending["fan.out0"] > 0
    # the watchdog's idle window is the fabric's: a shorter one stops the same deadlock sooner
    quick = prepare(w, shared_fabric([w], 4, max_fifo_depth=2, chunk_fifo_depth=0, watchdog=64))
    assert quick.design.watchdog == 64 and Fabric.from_json(quick.design.fabric.to_json()).watchdog == 64
    with pytest.raises(Deadlock, match="moved for 64 cycles") as err2:
        run(quick, "amaranth")
    import re
    stopped = [int(re.search(r"stopped after (\d+) cycles", str(e.value)).group(1)) for e in (err, err2)]
    assert stopped[1] < stopped[0] - 4000, stopped
    with pytest.raises(FabricError, match="fabric: watchdog must be an integer >= 1, got 0"):
        Fabric(tile=4, watchdog=0)


def test_design_json_and_config_report(reduced_sweep, tmp_path):
    fab, ws, preps = reduced_sweep
    d = preps[0].design
    obj = json.loads(json.dumps(d.to_json()))
    assert obj["fabric"] == fab.to_json()
    assert [u["name"] for u in obj["units"]][:4] == ["load_x", "load_w1", "load_w3", "load_w2"]
    design2, prog2 = plan(preps[0].lowered.graph, fab, "other-name")
    assert design2.key() == d.key() and prog2.config == preps[0].program.config


def test_build_writes_a_standalone_testbench_that_fails_on_a_mismatch(reduced_sweep, tmp_path):
    """``build`` output runs on its own (cocotb + Verilator) and catches one altered expected word."""
    import subprocess
    import sys

    from step_hdl.flow import build
    fab, ws, preps = reduced_sweep
    out = tmp_path / "tb"
    report = build(prep := preps[SWEEP.index((8, 16))], out)
    for f in ("top.v", "harness.v", "config.json", "fabric.json", "design.json", "mapping.json", "lowered.dot",
              "test_fabric.py", "job.json", "image.hex", "run.py"):
        assert (out / f).stat().st_size > 0, f
    # the inputs start in the DRAM model's word array from the file, not through the backdoor
    assert (out / "image.hex").read_text().split() == prep.job()["image"]
    assert "image" not in json.loads((out / "job.json").read_text())
    assert report["key"] == prep.design.key() and report["reference_offchip_bytes"] == 7424
    # the binding's fit check, in the report: every kind the graph uses, within what the fabric has
    assert report["fabric_units"]["Map"] == {"used": 6, "available": prep.design.fabric.units["Map"]}
    assert report["fabric_units"]["MatMul"] == {"used": 3, "available": prep.design.fabric.units["MatMul"]}
    assert all(0 < v["used"] <= v["available"] for v in report["fabric_units"].values() if v["used"])
    top_v = (out / "top.v").read_text()
    assert f"module {report['top_module']}_top(" in top_v
    assert "ctr_addr" not in top_v and "ctr_addr" in (out / "harness.v").read_text()   # counters: testbench only
    assert json.loads((out / "config.json").read_text())["writes"] == prep.program.config

    def run_tb():
        return subprocess.run([sys.executable, "run.py"], cwd=out, capture_output=True, text=True, timeout=1800)

    ok = run_tb()
    assert ok.returncode == 0 and "PASSED" in ok.stdout, ok.stdout[-2000:] + ok.stderr[-2000:]
    # quiet: a line per step and the result with the cycles; the simulator's log goes to a file
    lines = ok.stdout.splitlines()
    assert len(lines) <= 3 and lines[-1].startswith("PASSED: the fabric finished in "), ok.stdout
    assert "cycles" in lines[-1] and (out / "sim_verilator.log").exists() and ok.stderr == ""
    job = json.loads((out / "job.json").read_text())
    job["expected"]["y"][3] = format(int(job["expected"]["y"][3], 16) ^ 1, "x")
    (out / "job.json").write_text(json.dumps(job))
    bad = run_tb()
    assert bad.returncode == 1 and "output y: word 3 differs" in bad.stdout, bad.stdout[-2000:]


# ----------------------------------------------------------------------------- dynamic tiling (MoE)

def _moe_checks(w, prep, res):
    assert res.status == "done"
    assert res.outputs_match, res.mismatches
    assert np.array_equal(prep.expected["y"], w.expected["y"])      # the interpreter agrees with numpy
    # row tiles move [1, P] and [1, 1] pieces; each request carries exactly the tile's bytes, so the RTL
    # counts exactly the symbolic traffic substituted with the per-expert token counts
    sym = metrics(w.graph).subs(w.subs).offchip_bytes
    assert res.offchip_bytes == int(sym) == prep.reference_bytes


def test_moe_dynamic_tiling_small_on_amaranth():
    """Dynamic token tiles in RTL: two experts, eight tokens; each expert's rows form one [N_e, H] tile, packed
    into blocks of 4 rows (3 and 5 rows: one partial block, and a full one and a partial one); bit-exact.
    The two token tiles share a tile pool of 3 pages and fill it (``tests/test_pools.py``). Measured
    2026-12-02: RTL 354 cycles (366 before the MatMul units; 355 as row tiles), model 329 (-7.1 %)."""
    from step_hdl.workloads.moe import moe
    routing = np.array([[0], [1], [1], [0], [1], [1], [0], [1]])
    w = moe(routing, 2, hidden=8, inter=8, tile_inter=8, dtype="int16", tiling="dynamic")
    prep = prepare(w, 4)
    assert prep.program.tiles == {"x": (1, 4), "W1": (4, 4), "W3": (4, 4), "W2": (4, 4), "gates": (1, 1),
                                  "y": (1, 4)}
    res = run(prep, "amaranth")
    _moe_checks(w, prep, res)
    _model_within(w, res)


@pytest.mark.slow
@pytest.mark.parametrize("tile", [3, 6, 10, None], ids=["static3", "static6", "static10", "dynamic"])
def test_moe_mixtral_b64_on_verilator(routing, tile):
    """The acceptance runs: Mixtral's 8 experts, top-2, the real b64 routing trace, H=16, I=32 on 4x4 tiles,
    static token tiles of 3, 6, 10 rows and dynamic ones, all packed into blocks of 4 rows (the last one
    partial); bit-exact, the model within 10 %. Measured 2026-12-02 (``paper``, MatMul units, bursts, the
    RepeatStatic's block end on its last copy; dynamic tiles in a tile pool, the same cycles): RTL 1,131 / 1,212 /
    1,352 / 1,568 cycles, model 1,154 / 1,218 / 1,367 / 1,606 (+2.0 / +0.5 / +1.1 / +2.4 %; the model with the
    lowered chains' FIFOs and credit-paced loads); before the RepeatStatic change 1,259 / 1,323 / 1,475 / 1,717;
    with a Map and an Accum per matmul 1,270 / 1,345 / 1,497 / 1,735; as [1, 4] row tiles 1,525 / 1,674 /
    1,869 / 2,456. With dynamic tiles each expert's three MatMul units are active
    exactly ``ceil(n_e / P) · ni · (nb · kb + 2) + 2`` cycles: per block row of ``P`` token rows and
    intermediate tile (``ni = 2``), its ``nb · kb = 16`` products (no stop between its ``nb`` output tiles),
    the stop closing the block row in, and that stop out a cycle later, when the next block row's operands
    are not there yet; then the stream's last stop and done (expert 0, 13 rows: 146; 170 as a Map and an
    Accum, with a stop after every ``kb`` products)."""
    from step_hdl.workloads.moe import moe
    w = moe(routing("mixtral_b64"), 8, hidden=16, inter=32, tile_inter=16, dtype="int16",
            tiling="static" if tile else "dynamic", tile=tile)
    prep = prepare(w, 4)
    res = run(prep, "verilator")
    _moe_checks(w, prep, res)
    if tile is None:
        util = res.utilization(prep.design)
        for e in range(8):
            blocks = -(-int(w.subs[f"route_n{e}"]) // 4)
            for proj in ("gate_proj", "up_proj", "down_proj"):
                active = round(util[f"e{e}_{proj}"]["active"] * res.cycles)
                assert active == blocks * 2 * (4 * 4 + 2) + 2, (e, proj, active)
    _model_within(w, res)


@pytest.mark.slow
@pytest.mark.parametrize("tile", [4, 8, 16], ids=["static4", "static8", "static16"])
def test_moe_static_tiles_of_p_rows_mixtral_b64_on_verilator(routing, tile):
    """Static token tiles of a multiple of P rows, packed into full 4x4 tiles (the matmuls at the array's
    full rate) and unpacked again, on the real b64 routing (H=16, I=32): bit-exact, the symbolic bytes; the
    model within 10 %. Measured 2026-12-02 (``paper``, MatMul units, bursts, the RepeatStatic's block end on
    its last copy): static 4 / 8 / 16 RTL 1,137 / 1,279 / 1,433 cycles, model 1,168 / 1,324 / 1,495 (+2.7 /
    +3.5 / +4.3 %); before the RepeatStatic change 1,264 / 1,403 / 1,564; with a Map and an Accum per matmul
    1,279 / 1,445 / 1,651. Static 16 took 1,900 RTL cycles with 2-deep FIFOs into the in-order
    combine: the experts' branches blocked each other."""
    from step_hdl.workloads.moe import moe
    w = moe(routing("mixtral_b64"), 8, hidden=16, inter=32, tile_inter=16, dtype="int16", tiling="static",
            tile=tile)
    prep = prepare(w, 4)
    res = run(prep, "verilator")
    _moe_checks(w, prep, res)
    _model_within(w, res)


def _model_cycles(w, dram="paper") -> int:
    """The approximate model's cycles (timing only, user-level graph) on the RTL runs' fabric: 4x4 int16
    tiles, DRAM preset ``dram``."""
    return model(w, 4, dram).cycles


def _model_within(w, res, tolerance=0.10):
    """The approximate model predicts the RTL's cycles within ``tolerance``; returns the model's cycles."""
    cycles = _model_cycles(w)
    if abs(cycles / res.cycles - 1) > tolerance:
        raise ModelDisagreement((cycles, res.cycles))
    return cycles


def _moe_small_on_amaranth(unit_class, tolerance=0.10, **kw):
    """Two experts, eight tokens, on Amaranth: ``unit_class`` is in the fabric; bit-exact; the model within
    ``tolerance``."""
    from step_hdl.workloads.moe import moe
    routing = np.array([[0], [1], [1], [0], [1], [1], [0], [1]])
    w = moe(routing, 2, dtype="int16", **kw)
    prep = prepare(w, 4)
    assert any(u.cls == unit_class for u in prep.design.units)
    res = run(prep, "amaranth")
    _moe_checks(w, prep, res)
    _model_within(w, res, tolerance)


@pytest.mark.slow      # about 75 s; examples/moe_static.py runs static tiles in the suite
def test_moe_static_tiling_small_on_amaranth():
    """Static token tiles in RTL: rows padded to tiles of 3 (Reshape with padding, its flags summed per
    row), packed into one partial block of 3 rows, computed, unpacked, and the padding rows dropped (a
    KeepIfZero selector); bit-exact. Measured 2026-12-02: RTL 358 cycles, model 324 (-9.5 %); as row tiles
    (2026-12-01) RTL 345, model 311."""
    _moe_small_on_amaranth("KeepIfZero", hidden=8, inter=8, tile_inter=8, tiling="static", tile=3)


@pytest.mark.slow      # about 45 s
def test_moe_static_tiles_of_p_rows_small_on_amaranth():
    """Static token tiles of P = 4 rows in RTL: each block of 4 rows buffered and re-read column block by
    column block into an Accum retile_row that packs 4x4 tiles, the matmuls on 4x4 tiles, and the output
    unpacked by a FlatMap and the same kind of transposing buffer; bit-exact. Measured 2026-12-02: RTL 363
    cycles, model 325 (-10.5 %)."""
    from step_hdl.workloads.moe import moe
    routing = np.array([[0], [1], [1], [0], [1], [1], [0], [1]])
    w = moe(routing, 2, hidden=8, inter=8, tile_inter=8, dtype="int16", tiling="static", tile=4)
    prep = prepare(w, 4)
    res = run(prep, "amaranth")
    _moe_checks(w, prep, res)
    units = {n: u for u in prep.design.units for n in u.nodes}
    pack, matmul = units["e0_pack"].params, units["e0_gate_proj_tiles"].params
    assert (pack.rows, pack.cols, pack.updates, pack.state_rows, pack.state_cols) == (1, 4, ("retile_row",), 4, 4)
    assert (matmul.fns, matmul.rows, matmul.cols) == (("matmul",), 4, 4)
    assert units["e0_unpack_tiles"].cls == "FlatMap" and units["e0_unpack_buf"].cls == "OnChipBuffer"


@pytest.mark.slow
@pytest.mark.xfail(raises=ModelDisagreement, strict=True,
                   reason="static tiles of 3 and 10 rows are still the faster in RTL on this reduced layer: it is "
                          "not memory-bound, so the weight re-reads dynamic tiling saves cost little, and each "
                          "expert's one dynamic tile closes only with its last routed row (issue 18)")
def test_moe_static_against_dynamic_tiling_mixtral_b64_on_verilator(routing):
    """Dynamic tiling's RTL confirmation (as ``bench/paper/rtl_confirm.py dynamic-tiling``): static token
    tiles of 3 and 10 rows and dynamic tiles on the real b64 routing (H=16, I=32), bit-exact, with the
    symbolic off-chip bytes; the claims: dynamic tiling is the faster in RTL, and the model's static-3 /
    dynamic ratio is within 10 % of the RTL's. Measured 2026-12-01 (``paper-interval1``, row tiles): static 3
    1,511, static 10 1,963, dynamic 2,419 RTL cycles (model 1,410, 1,830, 2,492); at ``paper`` with P-row blocks
    (2026-12-02) 1,270, 1,497, 1,735, with MatMul units and bursts 1,131, 1,352, 1,568 (static 3 / dynamic
    0.721x, model 0.717x): dynamic tiles at the array's full rate, static still the faster."""
    from step_hdl.workloads.moe import moe
    rtl, model = {}, {}
    for tile in (3, 10, None):
        w = moe(routing("mixtral_b64"), 8, hidden=16, inter=32, tile_inter=16, dtype="int16",
                tiling="static" if tile else "dynamic", tile=tile)
        prep = prepare(w, 4)
        res = run(prep, "verilator", "paper-interval1")
        _moe_checks(w, prep, res)
        rtl[tile] = res.cycles
        model[tile] = _model_cycles(w, "paper-interval1")
    if not (rtl[3] > rtl[None] and rtl[10] > rtl[None]):
        raise ModelDisagreement(rtl)
    effect_rtl, effect_model = rtl[3] / rtl[None], model[3] / model[None]
    if not (effect_model > 1 and abs(effect_model / effect_rtl - 1) <= 0.10):
        raise ModelDisagreement((rtl, model))


@pytest.mark.slow
def test_moe_time_multiplexing_mixtral_b64_on_verilator(routing):
    """The time-multiplexing confirmation (as ``bench/paper/rtl_confirm.py time-multiplexing``): 8 experts
    on the real b64 routing trace, 1, 2 and 4 of them per region, bit-exact; the model's slowdown of each
    shared configuration against dedicated regions within 10 % of the RTL's. Measured 2026-12-02 (MatMul
    units, bursts across a walk's contiguous dimensions, the RepeatStatic's block end on its last copy, the
    expert tiles in a tile pool): RTL 694, 704, 748 cycles, model 734, 767, 791 (+5.8 / +8.9 / +5.7 %);
    slowdowns RTL 1.014x and 1.078x, model 1.045x and 1.078x. Before the RepeatStatic change (count + 2 cycles per [1, 1] gate on the
    gate-weighting path, load_gates -> weight -> sum_experts, which paced the run's last 342 cycles) RTL
    816; with bursts within one dimension only 830 (the token rows of x queued 8 to a channel, a request
    each); before the units issued bursts 787 / 795 / 837 (the DRAM merged separate requests of a port)."""
    from step_hdl.workloads.moe import moe
    rtl, model = {}, {}
    for group in (1, 2, 4):
        w = moe(routing("mixtral_b64"), 8, hidden=4, inter=8, tile_inter=4, dtype="int16", tiling="dynamic",
                experts_per_region=group)
        prep = prepare(w, 4)
        res = run(prep, "verilator")
        _moe_checks(w, prep, res)
        rtl[group] = res.cycles
        model[group] = _model_cycles(w)
    for group in (2, 4):
        slow_rtl, slow_model = rtl[group] / rtl[1], model[group] / model[1]
        assert slow_rtl > 1 and slow_model > 1
        if abs(slow_model / slow_rtl - 1) > 0.10:
            raise ModelDisagreement((group, slow_rtl, slow_model))


def _gqa_checks(w, prep, res):
    from step_hdl.metrics import observed_symbols
    assert res.status == "done"
    assert res.outputs_match, res.mismatches
    assert np.array_equal(prep.expected["outT"], w.expected["outT"])    # the interpreter agrees with numpy
    # every request carries one whole physical tile ([4, 4] q and outputs, [1, 4] K/V rows, the [1, 2] table
    # row), so the RTL counts exactly the symbolic traffic with the run's KV lengths substituted
    sym = metrics(w.graph).subs(observed_symbols(w.graph, w.run())).offchip_bytes
    assert res.offchip_bytes == int(sym) == prep.reference_bytes


def test_gqa_dynamic_parallelization_small_on_amaranth():
    """GQA decode with dynamic parallelization in RTL: 2 regions take 4 items as they free up (the credit
    cycle through EagerMerge), KV lengths from the b16 trace's first requests, scaled down."""
    from step_hdl.workloads.gqa import gqa_decode
    w = gqa_decode([16, 3, 15, 2], group=4, head_dim=4, regions=2, strategy="dynamic", dtype="int16")
    prep = prepare(w, 4)
    assert prep.program.tiles["kv_table"] == (1, 2) and prep.program.tiles["K"] == (1, 4)
    res = run(prep, "amaranth")
    _gqa_checks(w, prep, res)
    # four requests are mostly pipeline fill and drain, where the model is coarsest (+8 % here); the
    # acceptance figure (10 %) is the b16 trace's, in test_gqa_b16_on_verilator
    _model_within(w, res, tolerance=0.15)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["dynamic", "interleaved", "contiguous"])
def test_gqa_b16_on_verilator(kv_files, strategy):
    """The acceptance run (as ``bench/paper/rtl_confirm.py parallelization``): a real b16 KV trace (stdev
    479, lengths / 64: 1 to 20 rows), 16 requests, 4 regions, G = d = 4. Measured 2026-12-02 (MatMul units,
    bursts, Reshape's block end on its chunk's last element, the model's random stores with writes in
    flight, the model passing each token through the FIFOs of the units a node is lowered to): interleaved
    RTL 437 / model 464 (+6.2 %), contiguous 418 / 436 (+4.3 %), dynamic 707 / 656 (-7.2 %; -11.2 % without
    the FIFOs: each item's trip round the credit cycle passes some 40 units). The model waited for each
    store's acknowledgement before its next write until then (interleaved 485, contiguous 493: +11.0 /
    +17.9 %)."""
    from step_hdl.workloads.gqa import gqa_decode, scale_lengths
    from step_hdl.workloads.traces import kv_lengths
    w = gqa_decode(scale_lengths(kv_lengths(kv_files(16)[3]), 64), group=4, head_dim=4, regions=4,
                   strategy=strategy, dtype="int16")
    prep = prepare(w, 4)
    res = run(prep, "verilator")
    _gqa_checks(w, prep, res)
    _model_within(w, res)


def test_configuration_addresses_hold_large_fabrics():
    """The MoE fabric of the real trace has over 256 units: the unit field of a configuration address is
    16 bits wide, and an index that does not fit is an error, not an aliased write."""
    from step_hdl.mapper.design import TOP_CFG_ADDR_BITS, TOP_CFG_LAYOUT, pack_config
    w = pack_config(300, 0xABCD << 8 | 7)
    assert w & ((1 << TOP_CFG_ADDR_BITS) - 1) == 300 << 8 | 7 and w >> TOP_CFG_ADDR_BITS == 0xABCD
    assert TOP_CFG_LAYOUT.size == TOP_CFG_ADDR_BITS + 32
    with pytest.raises(FabricError, match="unit index 65536 does not fit the 16-bit unit field"):
        pack_config(1 << 16, 0)


def _mixed_type_matmul():
    """max(int16, int16) is int32 and feeds a matmul on an int16 fabric: its operand buffers hold int32
    tiles, twice the bytes of the fabric's element type."""
    from step_hdl.interp import run as interp_run
    g = Graph("mixed")
    for name, dt in (("a", "int16"), ("b", "int16"), ("w", "int32"), ("y", "int32")):
        g.tensor(name, 8, 8, dt)
    a, b, w = (g.load(t, tile=(8, 8), out_shape=[1], stride=[1], name=f"load_{t}") for t in "abw")
    g.store(g.map([g.map([a, b], "max", name="mx"), w], "matmul", name="mm"), "y", tile=(8, 8), name="store_y")
    rng = np.random.default_rng(0)
    t = {"a": rng.integers(-50, 50, (8, 8)).astype(np.int16), "b": rng.integers(-50, 50, (8, 8)).astype(np.int16),
         "w": rng.integers(-5, 5, (8, 8)).astype(np.int32)}
    return Workload(g, t, {}, {"y": interp_run(g, t).memory["y"]}, make_dtype("int16"))


def test_buffers_are_sized_by_the_type_they_hold():
    """The on-chip buffers were sized by the fabric's element type, so an int32 operand's block wrapped
    around its bank: 64 of 64 outputs wrong with no error. Now sized by the buffered stream's type, and a
    block that does not fit is an error naming the Bufferize."""
    w = _mixed_type_matmul()
    prep = prepare(w, 4)
    res = run(prep, "amaranth")
    assert res.outputs_match, res.mismatches
    small = shared_fabric([w], 4, sram_bytes=128)
    with pytest.raises(FabricError, match=r"Bufferize 'mm_buf_\w': holds 4 entries of int32\[4,4\] \(64 bytes "
                                          r"each\); the fabric's on-chip buffers hold 1 per bank \(sram_bytes 128, "
                                          r"two banks\): raise sram_bytes to at least 512"):
        prepare(w, small)


def test_relu_layer_bit_exact_on_amaranth():
    """A matmul, requantize and relu layer of a user's own: relu lowers like the element-wise maps and runs
    bit-exactly in RTL (a third of the outputs clipped to 0)."""
    from step_hdl.interp import run as interp_run
    from helpers import relu_layer
    g, t = relu_layer()
    want = np.maximum(np.clip((t["x"].astype(np.int64) @ t["w"]) >> 4, -32768, 32767), 0).astype(np.int16)
    assert np.array_equal(interp_run(g, t).memory["y"], want) and (want == 0).sum() > 10
    res = run(prepare(Workload(g, t, {}, {"y": want}, make_dtype("int16")), 4), "amaranth", waves=True)
    assert res.outputs_match, res.mismatches
    # the waveforms name the units and FIFOs after the graph's nodes and edges
    from pathlib import Path
    vcd = Path(res.waves)
    assert vcd.suffix == ".vcd" and vcd.parent.name == "waves"
    head = vcd.read_text()[:200_000]
    assert "$scope module u_" in head and "$scope module q_" in head and res.cycles > 0


@pytest.mark.parametrize("update, init", [("add", "zeros"), ("max", "lowest")])
def test_scan_bit_exact_on_amaranth(update, init):
    """A scan over each row of 4x4 tiles (its running sum or maximum stored after every tile) runs in RTL as
    the interpreter computes it."""
    from step_hdl.interp import run as interp_run
    g = Graph("scan")
    g.tensor("a", 8, 12, "int16")
    g.tensor("b", 8, 12, "int32")
    x = g.load("a", tile=(4, 4), out_shape=[2, 3], stride=[3, 1], name="load_a")
    g.store(g.scan(x, update, fn(init, rows=4, cols=4, dtype="int32"), rank=1, name="prefix"), "b",
            tile=(4, 4), name="store_b")
    a = {"a": np.random.default_rng(5).integers(-32768, 32767, (8, 12)).astype(np.int16)}
    want = interp_run(g, a).memory["b"]
    op = np.cumsum if update == "add" else np.maximum.accumulate
    ref = np.concatenate([op(a["a"][r:r + 4].astype(np.int64).reshape(4, 3, 4), axis=1).reshape(4, 12)
                          for r in (0, 4)])
    assert np.array_equal(want, ref)
    res = run(prepare(Workload(g, a, {}, {"b": want}, make_dtype("int16")), 4), "amaranth")
    assert res.outputs_match, res.mismatches
    assert np.array_equal(res.outputs["b"], want)


@pytest.mark.parametrize("rows, cols", [(8, 8), (8, 16), (12, 8), (4, 4), (6, 8), (1, 8)])
@pytest.mark.parametrize("f", ["row_max", "row_sum", "col_max", "col_sum", "sub_row_max"])
def test_reductions_bit_exact_in_rtl(rows, cols, f):
    """Every row and column reduction on blocks of 4x4 tiles, on wide, tall, single and row tiles (and
    x - row_max(x), the column broadcast) runs in RTL as the interpreter computes it, full int16 range."""
    from step_hdl.interp import run as interp_run
    from test_tiling import reduce_graph
    g = reduce_graph(rows, cols, f, "int16")
    x = {"x": np.random.default_rng(rows * 100 + cols).integers(-32768, 32767, (2 * rows, cols)).astype(np.int16)}
    want = interp_run(g, x).memory["y"]
    res = run(prepare(Workload(g, x, {}, {"y": want}, make_dtype("int16")), 4), "amaranth")
    assert res.outputs_match, res.mismatches
    assert np.array_equal(res.outputs["y"], want)


@pytest.mark.parametrize("kind", ["swiglu", pytest.param("moe", marks=pytest.mark.slow)])   # the MoE: 60 s
def test_pipelined_fabric_same_results_its_latency_in_the_model(kind):
    """``Fabric.pipeline``: the compute units' function stages and the buffers' SRAM output register. The
    same program on the same fabric with and without them: bit-exact both ways; the pipelined run takes at
    least as long, and the model, which counts every unit's declared latency, moves with the RTL."""
    import dataclasses
    if kind == "swiglu":
        w = swiglu(REDUCED["batch"], REDUCED["hidden"], 16, 4, 8, "int16")
    else:
        from step_hdl.workloads.moe import moe
        routing = np.array([[0], [1], [1], [0], [1], [1], [0], [1]])
        w = moe(routing, 2, hidden=8, inter=8, tile_inter=8, dtype="int16", tiling="dynamic")
    fab = shared_fabric([w], 4)
    runs = {}
    for pipeline in (False, True):
        f = dataclasses.replace(fab, pipeline=pipeline)
        prep = prepare(w, f)
        assert prep.design.fabric.pipeline == pipeline
        res = run(prep, "amaranth")
        assert res.status == "done" and res.outputs_match, res.mismatches
        runs[pipeline] = (res.cycles, model(w, f).cycles)
    (rtl0, model0), (rtl1, model1) = runs[False], runs[True]
    assert rtl1 >= rtl0 and model1 >= model0, runs
    for rtl, mod in runs.values():
        assert abs(mod / rtl - 1) <= 0.10, runs
