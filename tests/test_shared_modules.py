"""One Verilog module per distinct unit design and FIFO shape (``mapper/shared.py``, ``mapper.verilog.unit_modules``).
That the shared Verilog runs the same tokens in the same cycles as the Amaranth simulator's per-instance
elaboration is ``tests/hw/test_backends.py``'s fabric point and every Verilator test of the flow."""

import re

import pytest
from amaranth.back import rtlil

from step_hdl.flow import prepare
from step_hdl.mapper.design import built_units
from step_hdl.mapper.shared import SharedUnit, design_key, module_name
from step_hdl.sim.model.dram import DRAM_PRESETS
from step_hdl.mapper.verilog import unit_modules
from step_hdl.sim.fabric import verilog_for
from step_hdl.sim.rtl import RtlError, public_ports
from step_hdl.workloads import swiglu
from step_hdl.units.base import not_elaborated


@pytest.fixture(scope="module")
def prep():
    return prepare(swiglu(16, 8, 64, 8, 16, "int16"), 4)


def test_units_of_one_design_are_instances_of_one_module(prep):
    d = prep.design
    shared, text = unit_modules(d)
    designs = {design_key(u) for u in d.units}
    modules = {mod for mod, _ in shared["units"].values()}
    assert len(modules) == len(designs) == 9 < len(d.units) == 22
    for u in d.units:
        assert shared["units"][u.name][0] == module_name(u)
    queue_shapes = {(mod, ports) for mod, ports in shared["queues"].values()}
    assert len(queue_shapes) < len(d.edges) == len(shared["queues"])
    for mod in modules | {mod for mod, _ in queue_shapes}:
        assert len(re.findall(rf"^module {mod}\(", text, re.M)) == 1, mod
    assert "(* top" not in text                 # only the harness is a top
    harness, _, _ = verilog_for(d, DRAM_PRESETS["paper"], prep.depth())
    assert harness.count("(* top") == 1
    for u in d.units:                           # each unit instance, by its graph name, of its design's module
        assert re.search(rf"^\s*{module_name(u)} u_{u.name} \(", harness, re.M), u.name
    # the top level's stream signals are plain: no wire per payload field of every port (its own ports aside)
    top = re.search(r"^module \S+\.top\s*\(.*?^endmodule", harness, re.M | re.S).group(0)
    assert not re.search(r"^\s*wire [^\\]*\\(?!cfg__|mem\d+__)\S*__payload\S*\.", top, re.M)
    per_instance, _, _ = verilog_for(d, DRAM_PRESETS["paper"], prep.depth(), shared=False)
    assert len(re.findall(r"^module ", harness, re.M)) < len(re.findall(r"^module ", per_instance, re.M)) / 2


def test_a_shared_module_without_a_port_of_the_unit_is_an_error(prep):
    unit = built_units(prep.design)[prep.design.units[0].name]
    stub = SharedUnit(unit, "some_module", frozenset({"clk", "rst", "cfg__valid"}))
    assert stub.regs is unit.regs and stub.params is unit.params       # the unit's attributes, its own ports
    with pytest.raises(ValueError, match=r"shared unit module some_module has no port cfg__payload \(ports: "
                                         r"cfg__valid, clk, rst\)"):
        rtlil.convert(stub)


def test_a_fifo_between_two_shared_units_takes_their_signals(prep):
    """No second set of signals and no assignment per FIFO in the top level's netlist (the 8-expert MoE's
    netlist took 117 MB less)."""
    from amaranth.hdl import Fragment

    from step_hdl.mapper.top import FabricTop
    shared, _ = unit_modules(prep.design)
    top = FabricTop(prep.design, shared=shared)
    not_elaborated(top)  # elaborated by hand here
    m = top.elaborate(None)
    for e in prep.design.edges:
        q = m.submodules["q_" + e.label.replace(".", "__")]
        src, dst = m.submodules[f"u_{e.src}"], m.submodules[f"u_{e.dst}"]
        assert q.i.payload is getattr(src, e.src_port).payload and q.i.ready is getattr(src, e.src_port).ready
        assert q.o.valid is getattr(dst, e.dst_port).valid and q.o.payload is getattr(dst, e.dst_port).payload
    Fragment.get(m, None)                       # every submodule elaborated: none left unused


def test_the_harness_reads_its_inputs_only_into_registers(prep):
    """Verilator evaluates the logic a top-level input reaches on every call into the model: the harness
    registers every input but the clock, so that logic is one register per input."""
    text, name, _ = verilog_for(prep.design, DRAM_PRESETS["paper"], prep.depth())
    top = re.search(rf"^module {name}\(.*?^endmodule", text, re.M | re.S).group(0)
    inputs = [p for p in re.findall(r"^\s*input\s+(?:\[[^\]]*\]\s*)?(\S+)\s*;", top, re.M) if p != "clk"]
    assert {"rst", "cfg__payload", "cfg__valid", "start", "load_en", "load_addr", "load_data", "ctr_addr",
            "peek_addr"} <= set(inputs)
    for port in inputs:
        # its declaration and the module's port list aside, and the names Amaranth gives a layout's fields
        uses = [ln.strip() for ln in top.splitlines()[1:]
                if re.search(rf"(?<![\w$.\\]){port}(?![\w$.])", ln) and not re.match(r"\s*(input|wire)\b", ln)
                and not re.match(rf"\s*assign \\{port}\.\w+ += {port}\[", ln)]
        assert uses and all(re.fullmatch(rf"\S+ +<= {port};", u) for u in uses), (port, uses)


def test_only_the_top_levels_ports_are_public_to_verilator():
    text = ("module t(a, b, y);\n  input [3:0] a;\n  wire [3:0] a;\n  input b;\n  output y;\n  wire w;\n"
            "endmodule\nmodule other(z);\n  input z;\nendmodule\n")
    assert public_ports(text, "t").splitlines() == [
        "`verilator_config", 'public_flat_rw -module "t" -var "a"', 'public_flat_rw -module "t" -var "b"',
        'public_flat_rd -module "t" -var "y"']
    with pytest.raises(RtlError, match="module 'u' not found in the Verilog"):
        public_ports(text, "u")
