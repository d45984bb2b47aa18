"""Soft multipliers on ECP5 carry chains whose LUTs also form the partial products.

A multiplier the DSP blocks do not hold is built in LUTs. Yosys's ``booth``
pass (Booth-encoded partial products, a compressor tree of full adders in LUTs,
one final adder) takes 186 LUT4 equivalents for a registered signed 8x8 product
on ECP5 (192 placed logic cells, 135.1 MHz out of context). On ECP5 each half
of a ``CCU2C`` carry cell is a LUT4 ``P(A, B, C, D)`` (the propagate) beside a
LUT2 of ``A, B`` (the generate, the LUT4's values at ``C = D = 0``), so one half
adds two AND terms and a carry: ``P = (A & B) ^ (C & D)`` with the generate
``A & B``, which is right whenever ``P`` is 0. An array of such chains adds the
partial-product rows in pairs, then the pairs' sums pairwise: 36 ``CCU2C`` and
one LUT4 for the signed 8x8 after synthesis (37 generated; 73 LUT4 equivalents, 103 placed cells, 143.5 MHz).

Signed operands use the modified Baugh-Wooley form: the terms of the sign row and
the sign column inverted, and the constants ``2^n`` and ``2^(2n-1)`` added, all
modulo ``2^(2n)``. An inverted term goes on the ``A, B`` side of its half (its
value at ``C = D = 0`` is what the generate needs); where both terms of a bit are
inverted (once, at weight ``2n - 3``) one is formed in a LUT first.

:func:`techmap` writes a Yosys techmap file that maps the ``$mul`` cells of the
given shapes (unsigned, or signed with equal operand widths; the result no wider
than the exact product) and leaves any other to the flow's ``booth``.
"""

from __future__ import annotations

__all__ = ["multiplier_body", "techmap"]


def _init(x_inv: int, y_inv: int) -> int:
    """The LUT4 ``(A & B ^ x_inv) ^ (C & D ^ y_inv)``, index ``{D, C, B, A}``."""
    v = 0
    for idx in range(16):
        a, b, c, d = idx & 1, (idx >> 1) & 1, (idx >> 2) & 1, (idx >> 3) & 1
        v |= (((a & b) ^ x_inv) ^ ((c & d) ^ y_inv)) << idx
    return v


class _Netlist:
    """Verilog lines of ``CCU2C`` chains and LUTs, results truncated at ``width`` bits."""

    def __init__(self, width: int):
        self.width, self.lines, self.n = width, [], 0

    def wire(self) -> str:
        self.n += 1
        self.lines.append(f"  wire w{self.n};")
        return f"w{self.n}"

    def nand(self, p: str, q: str) -> str:
        w = self.wire()
        self.lines.append(f"  assign {w} = ~({p} & {q});")
        return w

    def chain(self, bits, lo: int) -> list[str]:
        """The sum of the bits' terms at weights ``lo`` up (each bit ``(x, y)``, a term ``(p, q, inverted)``
        meaning ``p & q``, or None), with its carry out, truncated at ``width``: signal names by weight."""
        hi = min(lo + len(bits) + 1, self.width)
        bits = (list(bits) + [(None, None)] * (hi - lo))[:hi - lo]
        if len(bits) % 2:
            bits.append((None, None))
        out, cin = [], "1'b0"
        zero = ("1'b0", "1'b0", 0)
        for k in range(0, len(bits), 2):
            pins, inits = [], []
            for x, y in bits[k:k + 2]:
                if y is not None and y[2]:
                    x, y = y, x
                assert y is None or not y[2], "two inverted terms in one bit"
                x, y = x or zero, y or zero
                pins += [x[0], x[1], y[0], y[1]]
                inits.append(_init(x[2], y[2]))
            s0, s1, co = self.wire(), self.wire(), self.wire()
            a0, b0, c0, d0, a1, b1, c1, d1 = pins
            self.lines.append(
                f"  CCU2C #(.INIT0(16'h{inits[0]:04x}), .INIT1(16'h{inits[1]:04x}), .INJECT1_0(\"NO\"), "
                f".INJECT1_1(\"NO\")) c{self.n} (.CIN({cin}), .A0({a0}), .B0({b0}), .C0({c0}), .D0({d0}), "
                f".A1({a1}), .B1({b1}), .C1({c1}), .D1({d1}), .S0({s0}), .S1({s1}), .COUT({co}));")
            out += [s0, s1]
            cin = co
        return out[:hi - lo]


def multiplier_body(n: int, m: int, signed: bool, width: int) -> str:
    """Verilog statements computing ``Y`` (``width`` bits) = ``A`` (``n`` bits) times ``B`` (``m`` bits),
    modulo ``2^width``; signed needs ``n == m``."""
    if signed and n != m:
        raise ValueError(f"a signed carry-chain multiplier needs equal operand widths, got {n} and {m}")
    if not 1 <= width <= n + m or n < 2 or m < 2:
        raise ValueError(f"carry-chain multiplier {n}x{m} -> {width} bits: not supported")
    net = _Netlist(width)
    rows = []
    for i in range(m):
        rows.append({i + j: (f"A[{j}]", f"B[{i}]", int(signed and ((i == m - 1) != (j == n - 1))))
                     for j in range(n) if i + j < width})
    consts = {c for c in ((n, 2 * n - 1) if signed else ()) if c < width}
    sums = []                   # (lowest weight, signal names by weight)
    for i in range(0, m, 2):
        r0, r1 = rows[i], rows[i + 1] if i + 1 < m else {}
        weights = sorted(set(r0) | set(r1))
        if not weights:
            continue
        lo, hi = weights[0], weights[-1]
        if i + 2 >= m:          # the last pair takes the constants above every row
            hi = max([hi] + [c for c in consts if c > hi])
        bits = []
        for w in range(lo, hi + 1):
            x, y = r0.get(w), r1.get(w)
            if x is not None and y is not None and x[2] and y[2]:
                y = (net.nand(y[0], y[1]), "1'b1", 0)
            if (x is None or y is None) and w in consts:
                one = ("1'b1", "1'b1", 0)
                x, y = (one, y) if x is None else (x, one)
                consts.discard(w)
            bits.append((x, y))
        sums.append((lo, net.chain(bits, lo)))
    assert not consts, f"constants {consts} found no place"
    while len(sums) > 1:
        nxt = []
        for k in range(0, len(sums) - 1, 2):
            (l0, s0), (l1, s1) = sums[k], sums[k + 1]
            lo, hi, start = min(l0, l1), max(l0 + len(s0), l1 + len(s1)), max(l0, l1)
            term = lambda s, l, w: (s[w - l], "1'b1", 0) if l <= w < l + len(s) else None   # noqa: E731
            below = [(s0 if l0 < l1 else s1)[w - lo] for w in range(lo, start)]
            nxt.append((lo, below + net.chain([(term(s0, l0, w), term(s1, l1, w)) for w in range(start, hi)],
                                              start)))
        if len(sums) % 2:
            nxt.append(sums[-1])
        sums = nxt
    lo, sig = sums[0]
    bits = (["1'b0"] * lo + sig + ["1'b0"] * width)[:width]
    return "\n".join(net.lines + [f"  assign Y = {{{', '.join(reversed(bits))}}};"])


def techmap(shapes) -> str:
    """A Yosys techmap file for ``$mul`` cells of the ``shapes`` ``(a_width, b_width, signed, y_width)``:
    one module each, failing (so that another mapping applies) on a cell of any other shape."""
    out = []
    for k, (n, m, signed, width) in enumerate(sorted(set(shapes))):
        s = int(signed)
        out.append(f"""(* techmap_celltype = "$mul" *)
module _step_hdl_carry_mul_{k} (A, B, Y);
  parameter A_SIGNED = 0;
  parameter B_SIGNED = 0;
  parameter A_WIDTH = 1;
  parameter B_WIDTH = 1;
  parameter Y_WIDTH = 1;
  input [A_WIDTH-1:0] A;
  input [B_WIDTH-1:0] B;
  output [Y_WIDTH-1:0] Y;
  wire _TECHMAP_FAIL_ = !(A_WIDTH == {n} && B_WIDTH == {m} && Y_WIDTH == {width} && A_SIGNED == {s}
                          && B_SIGNED == {s});
{multiplier_body(n, m, signed, width)}
endmodule
""")
    return "\n".join(out)


def supported(n: int, m: int, signed: bool, width: int) -> bool:
    """Whether :func:`multiplier_body` builds this shape."""
    return n >= 2 and m >= 2 and 1 <= width <= n + m and (not signed or n == m)


#: behavioural models of ``CCU2C`` (as Yosys's ``ccu2c_sim.vh``: a LUT4 propagate beside a LUT2 generate, the
#: LUT4's values at ``C = D = 0``) and of ``LUT4`` and ``LUT2``, for simulating :func:`multiplier_body`
MODEL_VERILOG = """
module LUT4 #(parameter [15:0] INIT = 0) (input A, B, C, D, output Z);
  assign Z = INIT[{D, C, B, A}];
endmodule
module LUT2 #(parameter [3:0] INIT = 0) (input A, B, output Z);
  assign Z = INIT[{B, A}];
endmodule
module CCU2C #(parameter [15:0] INIT0 = 0, INIT1 = 0, parameter INJECT1_0 = "YES", INJECT1_1 = "YES") (
  input CIN, A0, B0, C0, D0, A1, B1, C1, D1, output S0, S1, COUT);
  wire p0, g0, p1, g1;
  LUT4 #(.INIT(INIT0)) l40(.A(A0), .B(B0), .C(C0), .D(D0), .Z(p0));
  LUT2 #(.INIT(INIT0[3:0])) l20(.A(A0), .B(B0), .Z(g0));
  LUT4 #(.INIT(INIT1)) l41(.A(A1), .B(B1), .C(C1), .D(D1), .Z(p1));
  LUT2 #(.INIT(INIT1[3:0])) l21(.A(A1), .B(B1), .Z(g1));
  wire c0 = INJECT1_0 == "YES" ? 1'b0 : CIN;
  wire co0 = (~p0 & (INJECT1_0 == "YES" ? 1'b0 : g0)) | (p0 & CIN);
  wire c1 = INJECT1_1 == "YES" ? 1'b0 : co0;
  assign S0 = p0 ^ c0;
  assign S1 = p1 ^ c1;
  assign COUT = (~p1 & (INJECT1_1 == "YES" ? 1'b0 : g1)) | (p1 & co0);
endmodule
"""
