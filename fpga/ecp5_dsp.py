"""ECP5 DSP blocks with their own registers, for the pipelined units' multipliers.

Yosys's ``synth_ecp5`` maps a ``$mul`` to a ``MULT18X18D`` with every register
bypassed: it packs no flip-flop into the block. A pipelined matmul registers
its operands and then its products (``units.pipeline``), so its multipliers are
timed through the block's combinational path (4.45 ns) plus the routing to and
from flip-flops in the fabric: about 95 MHz for the 4x4 unit. With the
operands in the block's input registers and the products in its output
register the same values are in the same cycles, and the only paths left are
into the block and out of it.

:class:`Ecp5Dsp` is the platform the ECP5 flow elaborates a component for
(``fpga.ecp5.synthesize_ecp5``): :meth:`~step_hdl.units.pipeline.Pipe.products`
asks it for the blocks, and it instances them while its budget lasts. The
simulators elaborate without a platform, so they run the units' own
registers and multipliers.
"""

from __future__ import annotations

from amaranth.hdl import Cat, ClockSignal, Const, Instance, ResetSignal, Signal

__all__ = ["MODEL_VERILOG", "PARAMETERS", "WIDTH", "Ecp5Dsp", "instance_ports"]

#: operand width of a ``MULT18X18D`` (signed; an unsigned operand up to 17 bits fits as a signed one)
WIDTH = 18


def _fits(v) -> bool:
    shape = v.shape()
    return len(v) <= (WIDTH if shape.signed else WIDTH - 1)


def instance_ports(a, b, ce, product) -> dict:
    """The ``MULT18X18D`` ports of one registered product ``a * b`` into ``product`` (36 bits): operands
    sign-extended to 18 bits and multiplied as signed; clock, enable and reset 0 of the block."""
    a18, b18 = (v.as_signed() if v.shape().signed else Cat(v, Const(0, 1)).as_signed() for v in (a, b))
    a18, b18 = (Cat(v, *([v[-1]] * (WIDTH - len(v)))) for v in (a18, b18))
    ports = {f"i_A{k}": a18[k] for k in range(WIDTH)}
    ports.update({f"i_B{k}": b18[k] for k in range(WIDTH)})
    # the C input, the shift chains and clocks 1-3 are left unconnected, as Yosys's own mapping leaves
    # them (tied to constants, their many ground arcs are more than nextpnr routes in a 4x4 matmul)
    ports.update(i_SIGNEDA=Const(1, 1), i_SIGNEDB=Const(1, 1), i_SOURCEA=Const(0, 1), i_SOURCEB=Const(0, 1),
                 i_CLK0=ClockSignal(), i_CE0=ce, i_RST0=ResetSignal())
    ports.update({f"o_P{k}": product[k] for k in range(2 * WIDTH)})
    return ports


#: the block's parameters: operands in the input registers and the product in the output register, all on
#: clock, enable and reset 0 (a synchronous reset, as Amaranth's ``sync`` domain); no pipeline register
PARAMETERS = {
    "p_REG_INPUTA_CLK": "CLK0", "p_REG_INPUTA_CE": "CE0", "p_REG_INPUTA_RST": "RST0",
    "p_REG_INPUTB_CLK": "CLK0", "p_REG_INPUTB_CE": "CE0", "p_REG_INPUTB_RST": "RST0",
    "p_REG_INPUTC_CLK": "NONE", "p_REG_PIPELINE_CLK": "NONE",
    "p_REG_OUTPUT_CLK": "CLK0", "p_REG_OUTPUT_CE": "CE0", "p_REG_OUTPUT_RST": "RST0",
    "p_GSR": "DISABLED", "p_RESETMODE": "SYNC", "p_MULT_BYPASS": "DISABLED",
}


def _model() -> str:
    a = ", ".join(f"A{k}" for k in range(WIDTH))
    b = ", ".join(f"B{k}" for k in range(WIDTH))
    p = ", ".join(f"P{k}" for k in range(2 * WIDTH))
    cat = lambda x, n: "{" + ", ".join(f"{x}{k}" for k in reversed(range(n))) + "}"  # noqa: E731
    outs = "\n".join(f"  assign P{k} = p_out[{k}];" for k in range(2 * WIDTH))
    return f"""
module MULT18X18D #(
  parameter REG_INPUTA_CLK = "NONE", REG_INPUTA_CE = "CE0", REG_INPUTA_RST = "RST0",
  parameter REG_INPUTB_CLK = "NONE", REG_INPUTB_CE = "CE0", REG_INPUTB_RST = "RST0",
  parameter REG_INPUTC_CLK = "NONE", REG_PIPELINE_CLK = "NONE",
  parameter REG_OUTPUT_CLK = "NONE", REG_OUTPUT_CE = "CE0", REG_OUTPUT_RST = "RST0",
  parameter GSR = "ENABLED", RESETMODE = "SYNC", MULT_BYPASS = "DISABLED"
) (
  input {a},
  input {b},
  input SIGNEDA, SIGNEDB, SOURCEA, SOURCEB, CLK0, CE0, RST0,
  output {p}
);
  // the modes Ecp5Dsp uses: each of the A, B and output registers on clock, enable and reset 0, or none
  initial if (REG_INPUTC_CLK != "NONE" || REG_PIPELINE_CLK != "NONE" || MULT_BYPASS != "DISABLED"
              || RESETMODE != "SYNC" || (REG_INPUTA_CLK != "NONE" && REG_INPUTA_CLK != "CLK0")
              || (REG_INPUTB_CLK != "NONE" && REG_INPUTB_CLK != "CLK0")
              || (REG_OUTPUT_CLK != "NONE" && REG_OUTPUT_CLK != "CLK0")) begin
    $display("MULT18X18D model: a mode it does not model");
    $finish;
  end
  wire [17:0] a = {cat("A", WIDTH)}, b = {cat("B", WIDTH)};
  reg [17:0] a_r = 0, b_r = 0;
  reg [35:0] p_r = 0;
  wire [17:0] a_in = REG_INPUTA_CLK == "CLK0" ? a_r : a, b_in = REG_INPUTB_CLK == "CLK0" ? b_r : b;
  wire signed [18:0] a_s = {{SIGNEDA & a_in[17], a_in}}, b_s = {{SIGNEDB & b_in[17], b_in}};
  wire signed [37:0] full = a_s * b_s;
  wire [35:0] prod = full[35:0];
  always @(posedge CLK0) begin
    if (RST0) begin a_r <= 0; b_r <= 0; p_r <= 0; end
    else if (CE0) begin a_r <= a; b_r <= b; p_r <= prod; end
  end
  wire [35:0] p_out = REG_OUTPUT_CLK == "CLK0" ? p_r : prod;
{outs}
endmodule
"""


#: a behavioural model of ``MULT18X18D`` in the modes :class:`Ecp5Dsp` instances (each register on clock,
#: enable and reset 0, or bypassed; a synchronous reset), for simulating a component elaborated for the
#: platform in Verilog; any other mode stops the simulation with a message
MODEL_VERILOG = _model()


class Ecp5Dsp:
    """The platform of the ECP5 flow: ``MULT18X18D`` blocks with registers for a unit's registered products,
    and ``DP16KD`` block RAMs with their output registers for a buffer's registered read data
    (:meth:`registered_ram`).

    Parameters
    ----------
    budget : int or None
        Blocks it may give (None: no limit). A unit whose products do not all fit gets none (it builds
        them in logic, and the flow maps those to the blocks left or to LUTs).

    Attributes
    ----------
    used : int
        Blocks given so far.
    """

    def __init__(self, budget: int | None = None):
        if budget is not None and (not isinstance(budget, int) or budget < 0):
            raise ValueError(f"Ecp5Dsp: budget must be a count >= 0 or None, got {budget!r}")
        self.budget, self.used = budget, 0

    def registered_products(self, m, pairs, ce, name: str):
        """``a * b`` of each pair, the operands registered in the block's input registers and the product
        in its output register, loading when ``ce`` is high (two cycles of latency, as two cuts of
        ``units.pipeline``); ``None`` when an operand is wider than the block or the budget is spent."""
        if not pairs or any(not _fits(a) or not _fits(b) for a, b in pairs):
            return None
        if self.budget is not None and self.used + len(pairs) > self.budget:
            return None
        self.used += len(pairs)
        out = []
        for k, (a, b) in enumerate(pairs):
            product = Signal(2 * WIDTH, name=f"{name}_p{k}")
            m.submodules[f"{name}_dsp{k}"] = Instance("MULT18X18D", **PARAMETERS,
                                                      **instance_ports(a, b, ce, product))
            shape = (a * b).shape()         # the product as the unit's own multiplier has it (exact in 36 bits)
            low = product[:shape.width]
            out.append(low.as_signed() if shape.signed else low)
        return out

    def registered_ram(self, m, width: int, depth: int, name: str):
        """A memory with its read data in the block RAMs' output registers (``fpga.ecp5_bram``), for a
        buffer that registers its SRAM's data; ``None`` when it is deeper than the blocks' narrowest mode."""
        from .ecp5_bram import registered_ram
        return registered_ram(m, width, depth, name)
