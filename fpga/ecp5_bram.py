"""ECP5 block RAMs with their output register, for the on-chip buffer's registered read data.

A buffer built with ``out_reg`` (a fabric with ``pipeline``) registers its
SRAM's read data before the stop merger (``units.onchip``). Yosys's
``synth_ecp5`` maps the SRAM to ``DP16KD`` blocks without their output
register (``REGMODE NOREG``) and the data register to fabric flip-flops, so
the block's slow clock-to-output (about 6 ns) and the route to the flip-flops
are in one cycle: the pipelined buffer's critical path (121.1 MHz at 4x4 int8).
With the data in the block's own output register (``REGMODE OUTREG``) the same
values are in the same cycles and the path ends at the block.

:func:`registered_ram` instances the blocks for the platform of the ECP5 flow
(``fpga.ecp5_dsp.Ecp5Dsp.registered_ram``); the simulators elaborate without a
platform and run the unit's own memory and register. :data:`MODEL_VERILOG` is a
behavioural model of the block in the modes used here, for simulating such an
elaboration in Verilog.
"""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Signal

__all__ = ["MODEL_VERILOG", "MODES", "registered_ram"]

#: the ``DP16KD`` data widths used, each with the words a block holds and the low bits of a port's 14-bit
#: address below the word address (in the 36-bit mode the write port's four lowest are its byte enables)
MODES = ((36, 512, 5), (18, 1024, 4), (9, 2048, 3))
_PINS = 18


def _mode(depth: int):
    """The narrowest-word mode whose blocks hold ``depth`` words (fewest blocks for the width), or None."""
    for width, words, low in MODES:
        if depth <= words:
            return width, words, low
    return None


def registered_ram(m, width: int, depth: int, name: str):
    """A memory of ``depth`` words of ``width`` bits in ``DP16KD`` blocks side by side, one write port and
    one read port with the read data in the blocks' output registers; ``None`` for a memory deeper than one
    block in its 9-bit mode (2,048 words). Returns a namespace with ``write`` (``addr``, ``data``, ``en``),
    ``read`` (``addr``, ``en``: the address is taken when ``en`` is high, as an Amaranth read port with an
    enable) and ``out_en`` (the output registers load the read data when high) for the unit to drive, and
    ``data``: the output registers. So ``data`` is what a register loading the read port's data under
    ``out_en`` would hold. A read of the word written in the same cycle is not defined in the blocks
    (Amaranth's read port gives the old word; Yosys's own mapping adds logic for that): the unit must not
    read a word while it writes it (the model stops the simulation if it does)."""
    mode = _mode(depth)
    if mode is None:
        return None
    bits, _words, low = mode
    write = SimpleNamespace(addr=Signal(range(depth), name=f"{name}_waddr"), data=Signal(width, name=f"{name}_wdata"),
                            en=Signal(name=f"{name}_we"))
    read = SimpleNamespace(addr=Signal(range(depth), name=f"{name}_raddr"), en=Signal(name=f"{name}_re"))
    out_en = Signal(name=f"{name}_oce")
    data = Signal(width, name=f"{name}_rdata")
    wide = bits == 36
    # the write port's low address bits: in the 36-bit mode four byte enables and one unused bit, in the
    # 18-bit mode two byte enables (both set) and two unused bits, in the 9-bit mode three unused bits
    below = {36: Cat(write.en.replicate(4), Const(0, 1)), 18: Const(0b0011, 4), 9: Const(0, 3)}[bits]
    waddr = Cat(below, write.addr)
    raddr = Cat(Const(0, low), read.addr)
    chunks = []
    for k, lo in enumerate(range(0, width, bits)):
        din = write.data[lo:lo + bits]
        dout = Signal(bits, name=f"{name}_do{k}")
        ports = {"i_CLKA": ClockSignal(), "i_CLKB": ClockSignal(), "i_RSTA": Const(0), "i_RSTB": Const(0),
                 "i_CEA": write.en if wide else Const(1), "i_WEA": Const(1) if wide else write.en,
                 "i_OCEA": out_en if wide else Const(1), "i_CEB": read.en, "i_WEB": Const(0), "i_OCEB": out_en}
        for c in ("A", "B"):
            ports.update({f"i_CS{c}{j}": Const(0) for j in range(3)})
        ports.update({f"i_ADA{j}": waddr[j] if j < len(waddr) else Const(0) for j in range(14)})
        ports.update({f"i_ADB{j}": raddr[j] if j < len(raddr) else Const(0) for j in range(14)})
        din = Cat(din, Const(0, 2 * _PINS))
        ports.update({f"i_DIA{j}": din[j] for j in range(_PINS)})
        ports.update({f"i_DIB{j}": din[_PINS + j] if wide else Const(0) for j in range(_PINS)})
        # the 36-bit mode reads its low half on the A outputs and its high half on the B outputs
        outs = [f"DOA{j}" for j in range(_PINS)] + [f"DOB{j}" for j in range(_PINS)] if wide else \
            [f"DOB{j}" for j in range(bits)]
        ports.update({f"o_{pin}": dout[j] for j, pin in enumerate(outs[:bits])})
        m.submodules[f"{name}_bram{k}"] = Instance(
            "DP16KD", p_DATA_WIDTH_A=bits, p_DATA_WIDTH_B=bits, p_REGMODE_A="OUTREG" if wide else "NOREG",
            p_REGMODE_B="OUTREG", p_RESETMODE="SYNC", p_ASYNC_RESET_RELEASE="SYNC", p_CSDECODE_A="0b000",
            p_CSDECODE_B="0b000", p_WRITEMODE_A="NORMAL", p_WRITEMODE_B="NORMAL", p_GSR="DISABLED", **ports)
        chunks.append(dout)
    m.d.comb += data.eq(Cat(*chunks)[:width])
    return SimpleNamespace(write=write, read=read, out_en=out_en, data=data)


def _pins(prefix: str, n: int) -> str:
    """``prefix{n-1}, ..., prefix0``: a port's pins, most significant first."""
    return ", ".join(f"{prefix}{k}" for k in reversed(range(n)))


def _model() -> str:
    return f"""
module DP16KD #(
  parameter DATA_WIDTH_A = 18, DATA_WIDTH_B = 18, REGMODE_A = "NOREG", REGMODE_B = "NOREG",
  parameter RESETMODE = "SYNC", ASYNC_RESET_RELEASE = "SYNC", CSDECODE_A = "0b000", CSDECODE_B = "0b000",
  parameter WRITEMODE_A = "NORMAL", WRITEMODE_B = "NORMAL", GSR = "ENABLED"
) (
  input {_pins("DIA", _PINS)},
  input {_pins("ADA", 14)},
  input CEA, OCEA, CLKA, WEA, RSTA, CSA2, CSA1, CSA0,
  output {_pins("DOA", _PINS)},
  input {_pins("DIB", _PINS)},
  input {_pins("ADB", 14)},
  input CEB, OCEB, CLKB, WEB, RSTB, CSB2, CSB1, CSB0,
  output {_pins("DOB", _PINS)}
);
  localparam W = DATA_WIDTH_A, LOW = W == 36 ? 5 : W == 18 ? 4 : 3;
  initial if (DATA_WIDTH_B != W || (W != 36 && W != 18 && W != 9) || REGMODE_B != "OUTREG") begin
    $display("DP16KD model: a mode it does not model");
    $finish;
  end
  wire [35:0] di = {{{_pins("DIB", _PINS)}, {_pins("DIA", _PINS)}}};
  wire [13:0] ada = {{{_pins("ADA", 14)}}};
  wire [13:0] adb = {{{_pins("ADB", 14)}}};
  // the 36-bit mode writes on CEA with its byte enables on ADA0-3; the others on CEA and WEA
  wire we = W == 36 ? CEA & WEA & (&ada[3:0]) : CEA & WEA;
  reg [35:0] mem [0:2047];
  reg [35:0] latch = 0, out = 0;
  integer i;
  initial for (i = 0; i < 2048; i = i + 1) mem[i] = 0;
  always @(posedge CLKA) if (we) mem[ada >> LOW] <= di;
  always @(posedge CLKB) begin
    // the block's read of the word its other port writes in the same cycle is not defined (Yosys's own
    // mapping adds logic to return the old word): the unit must never do it
    if (CEB && we && (adb >> LOW) == (ada >> LOW)) begin
      $display("DP16KD model: a read of the word written in the same cycle");
      $finish;
    end
    if (CEB) latch <= mem[adb >> LOW];
    if (OCEB) out <= latch;
  end
  wire [35:0] q = W == 36 ? out : {{18'b0, out[17:0]}};
  assign {{{_pins("DOA", _PINS)}}} = q[17:0];
  assign {{{_pins("DOB", _PINS)}}} = W == 36 ? q[35:18] : q[17:0];
endmodule
"""


#: a behavioural model of ``DP16KD`` in the modes :func:`registered_ram` instances (port A writes, port B
#: reads; 36-bit words, or 18 or 9 on each port; the read data in the output register), for simulating a
#: component elaborated for the ECP5 platform in Verilog; any other mode stops the simulation with a message
MODEL_VERILOG = _model()
