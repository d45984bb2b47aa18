"""The ECP5 flow's soft multipliers on carry chains (``fpga.ecp5_carry_mul``): every product of every operand
pair, against Verilog's ``*``, for the shapes the flow maps (simulated with the cells' behavioural models);
the flow puts them in place of Yosys's Booth multipliers."""

import json
import shutil
import subprocess

import pytest

from step_hdl.fpga.ecp5_carry_mul import MODEL_VERILOG, multiplier_body, supported, techmap

needs_icarus = pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog is not installed")


@needs_icarus
@pytest.mark.parametrize("n, m, signed, width", [(8, 8, True, 16), (8, 8, False, 16), (4, 4, True, 8),
                                                 (6, 3, False, 9), (8, 8, True, 12), (5, 5, True, 10),
                                                 (2, 2, True, 4), (7, 7, False, 11)])
def test_every_product(tmp_path, n, m, signed, width):
    sa = "$signed(a) * $signed(b)" if signed else "a * b"
    text = f"""
module mul(input [{n-1}:0] A, input [{m-1}:0] B, output [{width-1}:0] Y);
{multiplier_body(n, m, signed, width)}
endmodule
module tb;
  reg [{n-1}:0] a; reg [{m-1}:0] b; wire [{width-1}:0] y;
  wire [{n + m - 1}:0] want = {sa};
  mul dut(.A(a), .B(b), .Y(y));
  integer i, j, bad = 0;
  initial begin
    for (i = 0; i < {1 << n}; i = i + 1) for (j = 0; j < {1 << m}; j = j + 1) begin
      a = i; b = j; #1;
      if (y !== want[{width-1}:0]) bad = bad + 1;
    end
    $display("wrong %0d", bad); $finish;
  end
endmodule
{MODEL_VERILOG}"""
    (tmp_path / "t.v").write_text(text)
    subprocess.run(["iverilog", "-g2012", "-o", str(tmp_path / "t"), str(tmp_path / "t.v")], check=True)
    out = subprocess.run(["vvp", "-n", str(tmp_path / "t")], check=True, capture_output=True, text=True).stdout
    assert "wrong 0" in out, out


def test_shapes_and_errors():
    assert supported(8, 8, True, 16) and supported(6, 3, False, 9)
    assert not supported(8, 6, True, 14) and not supported(8, 8, True, 17) and not supported(1, 8, False, 9)
    with pytest.raises(ValueError, match="a signed carry-chain multiplier needs equal operand widths, got 8 and 6"):
        multiplier_body(8, 6, True, 14)
    with pytest.raises(ValueError, match=r"carry-chain multiplier 8x8 -> 17 bits: not supported"):
        multiplier_body(8, 8, True, 17)


def test_the_signed_8x8_is_37_carry_cells_and_a_lut():
    """(Yosys removes one whose outputs are not used: 36 after synthesis.)"""
    text = multiplier_body(8, 8, True, 16)
    assert text.count("CCU2C #(") == 37 and text.count("assign w") == 1


def test_the_flow_maps_soft_multipliers_on_carry_chains(tmp_path):
    """A signed 8x8 multiplier with no DSP block left: carry cells and one LUT after synthesis, no Booth tree;
    a 16x10 one (a shape not built on chains) still Booth's."""
    from amaranth.hdl import Module, Signal, signed
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out
    from step_hdl.fpga.ecp5 import synthesize

    class Two(wiring.Component):
        a: In(signed(8))
        b: In(signed(8))
        c: In(signed(16))
        d: In(signed(10))
        o: Out(signed(16))
        p: Out(signed(26))

        def elaborate(self, platform):
            m = Module()
            m.d.sync += [self.o.eq(self.a * self.b), self.p.eq(self.c * self.d)]
            return m

    synthesize(Two(), "two", workdir=tmp_path, dsp_budget=0, place=False)
    assert "_step_hdl_carry_mul_0" in (tmp_path / "soft_mul.v").read_text()
    assert "_step_hdl_carry_mul_1" not in (tmp_path / "soft_mul.v").read_text()
    cells = json.loads((tmp_path / "stat.json").read_text())["design"]["num_cells_by_type"]
    assert cells.get("MULT18X18D", 0) == 0 and cells["CCU2C"] >= 36
