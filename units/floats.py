"""Floating point in hardware: combinational Amaranth twins of :mod:`step_hdl.floats`, bit for bit.

Every function here builds Amaranth values from element values (bit patterns of
:data:`~step_hdl.floats.BF16` or :data:`~step_hdl.floats.FP32`) and returns the
bit pattern of the result, by the rules of :mod:`step_hdl.floats`: correctly
rounded to nearest, ties to even; subnormal operands read as zero and results
whose rounded magnitude is below ``2**-126`` are ``+0``; every zero is ``+0``;
overflow gives Inf; NaN is canonical. The units (:mod:`step_hdl.units.functions`)
build tiles of them; ``tests/hw/test_floats.py`` checks each against
:mod:`step_hdl.floats` on random and edge values.

=================  ======================================  ==================================================
function           what                                    hardware (per element)
=================  ======================================  ==================================================
:func:`add`        ``a + b`` (``sub``: ``b`` negated)       compare, align shift with sticky, add, leading-one
                                                           search, normalize shift, round
:func:`mul`        ``a * b``                               ``(ma+1) x (mb+1)``-bit multiplier, round
:func:`div`        ``a / b``                               ``(m+3)``-bit quotient divider, round
:func:`fmax`       the larger; NaN if either is            a magnitude comparator
:func:`convert`    to another format                       round (narrowing) or wiring (widening)
:func:`exp_bf16`   ``exp(x)``, the fixed-point recipe      8 x 24 multiplier, shifter, two 65-entry tables,
                                                           17 x 10 multiplier, round
:func:`silu_bf16`  ``x / (1 + exp(-x))``                   exp, add, div
:func:`fp32_sum`   running fp32 sum of groups of four      per group ``(t0 + t1) + (t2 + t3)``, one add each
=================  ======================================  ==================================================

All are purely combinational (the unit around them registers the result). Each takes the module ``m``
it adds its named intermediate signals to: a value used several times is computed once, which keeps the
Python simulator's generated code small (inlined, the adder's shifts and leading-one search would be
copied into every use).
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Mux, Signal, Value, unsigned

from step_hdl.floats import BF16, EXP_TABLE, FP32, LOG2E_Q23, Format

__all__ = ["BIAS", "Unpacked", "unpack", "pack", "round_pack", "add", "sub", "mul", "div", "fmax", "convert",
           "negate", "exp_bf16", "silu_bf16", "group_sum", "fp32_sum"]

BIAS = 127
#: biased exponent field of Inf and NaN
EMAX = 0xFF


def _nan(fmt: Format) -> Const:
    return Const(fmt.nan, fmt.bits)


def _inf(fmt: Format, sign) -> Value:
    return Cat(Const(0, fmt.man), Const(EMAX, 8), sign)


def wire(m, value, name: str) -> Signal:
    """A combinational signal of ``m`` holding ``value`` (same shape)."""
    value = Value.cast(value)
    sig = Signal(value.shape(), name=name)
    m.d.comb += sig.eq(value)
    return sig


class Unpacked:
    """An operand as the units read it: ``sign``, biased exponent ``exp`` (8 bits), significand ``sig``
    (``man + 1`` bits, the implicit 1 on top; 0 for a zero) and the flags ``zero`` (exponent field 0:
    zeros and flushed subnormals), ``inf``, ``nan``."""

    def __init__(self, m, v, fmt: Format):
        v = wire(m, v, "f_in")
        m = fmt.man
        frac, e = v[:m], v[m:m + 8]
        self.fmt = fmt
        self.sign = v[m + 8]
        self.exp = e
        self.zero = e == 0
        top = e == EMAX
        self.inf = top & (frac == 0)
        self.nan = top & (frac != 0)
        self.sig = Mux(self.zero, 0, Cat(frac, Const(1, 1)))


def unpack(m, v, fmt: Format) -> Unpacked:
    return Unpacked(m, v, fmt)


def pack(sign, exp, frac, fmt: Format) -> Value:
    """The bit pattern of ``(-1)**sign · 1.frac · 2**(exp - 127)`` (``exp`` the 8-bit field)."""
    return Cat(Value.cast(frac)[:fmt.man], Value.cast(exp)[:8], sign)


def round_pack(m, sign, exp, sig, sticky, fmt: Format) -> Value:
    """Round and pack a finite nonzero result, or ``+0`` when ``sig`` is 0.

    ``sig`` (unsigned) has its leading one on its top bit; the value is ``sig / 2**(len(sig) - 1) ·
    2**(exp - 127)`` plus something below its last bit when ``sticky`` is set. ``exp`` is a signed value
    that may be out of the 8-bit range. Rounds to ``fmt.man + 1`` bits, ties to even; a rounded exponent
    at or above 255 gives Inf, at or below 0 gives ``+0`` (tininess after rounding).
    """
    sig, exp = wire(m, sig, "f_sig"), Value.cast(exp)
    if not exp.shape().signed:
        exp = Cat(exp, Const(0, 1)).as_signed()
    man, w = fmt.man, len(sig)
    if w < man + 3:                               # room for the kept bits and the guard bit
        sig = Cat(Const(0, man + 3 - w), sig)
        w = man + 3
    keep = sig[w - 1 - man:]
    guard = sig[w - 2 - man]
    rest = (sig[:w - 2 - man] != 0) | sticky if w - 2 - man > 0 else Value.cast(sticky)
    up = guard & (rest | keep[0])
    r = wire(m, (keep + up)[:man + 2], "f_rounded")
    carry = r[man + 1]
    frac = Mux(carry, r[1:man + 1], r[:man])
    e = wire(m, exp + carry, "f_exp")
    out = Mux(e >= EMAX, _inf(fmt, sign), pack(sign, e[:8], frac, fmt))
    return Mux((sig == 0) | (e <= 0), Const(0, fmt.bits), out)


def _lead_one(v) -> Value:
    """Position of the most significant set bit of ``v`` (a signal; 0 when ``v`` is 0)."""
    pos = Const(0, unsigned((len(v) - 1).bit_length() or 1))
    for i in range(len(v)):
        pos = Mux(v[i], i, pos)
    return pos


def _align(m, sig, d, width: int):
    """``sig`` shifted right by ``d`` (unsigned) with its lost bits or-ed into the lowest bit (sticky)."""
    sig = wire(m, sig, "f_small")
    dc = wire(m, Mux(d > width, width, d)[:width.bit_length()], "f_dist")
    kept = wire(m, sig >> dc, "f_kept")
    lost = (kept << dc)[:len(sig)] != sig
    return kept | lost


def _widen(u: Unpacked, man: int) -> Value:
    """``u``'s significand on ``man + 1`` bits."""
    return Cat(Const(0, man - u.fmt.man), u.sig) if man > u.fmt.man else u.sig


def add(m, a, b, fa: Format, fb: Format, fo: Format, negate_b: bool = False) -> Value:
    """``a + b`` (``a - b`` with ``negate_b``) of elements of formats ``fa`` and ``fb``, rounded to ``fo``."""
    ua, ub = unpack(m, a, fa), unpack(m, b, fb)
    sign_b = ~ub.sign if negate_b else ub.sign
    man = max(fa.man, fb.man, fo.man)       # guard, round and sticky below the result's last bit too
    # 3 bits below the significand: guard, round and sticky (the lost bits of the aligned operand)
    sa = wire(m, Cat(Const(0, 3), _widen(ua, man)), "f_sa")
    sb = wire(m, Cat(Const(0, 3), _widen(ub, man)), "f_sb")
    w = man + 4
    a_big = wire(m, Cat(sa, ua.exp) >= Cat(sb, ub.exp), "f_a_big")
    big_sig, small_sig = Mux(a_big, sa, sb), Mux(a_big, sb, sa)
    big_exp = wire(m, Mux(a_big, ua.exp, ub.exp), "f_big_exp")
    small_exp = Mux(a_big, ub.exp, ua.exp)
    big_sign = Mux(a_big, ua.sign, sign_b)
    aligned = _align(m, small_sig, (big_exp - small_exp)[:8], w)
    subtract = ua.sign ^ sign_b
    r = wire(m, Mux(subtract, big_sig - aligned, big_sig + aligned)[:w + 1], "f_sum")
    p = wire(m, _lead_one(r), "f_lead")
    norm = (r << (w - p)[:w.bit_length()])[:w + 1]
    exp = big_exp.as_unsigned() + p - (man + 3)
    out = round_pack(m, big_sign, exp, norm, 0, fo)
    inf_sign = Mux(ua.inf, ua.sign, sign_b)
    nan = ua.nan | ub.nan | (ua.inf & ub.inf & subtract)
    return Mux(nan, _nan(fo), Mux(ua.inf | ub.inf, _inf(fo, inf_sign), out))


def sub(m, a, b, fa: Format, fb: Format, fo: Format) -> Value:
    """``a - b`` rounded to ``fo``."""
    return add(m, a, b, fa, fb, fo, negate_b=True)


def negate(a, fmt: Format) -> Value:
    """``-a`` (NaN stays NaN; zero stays ``+0`` when the adder reads it)."""
    a = Value.cast(a)
    return Cat(a[:fmt.bits - 1], ~a[fmt.bits - 1])


def mul(m, a, b, fa: Format, fb: Format, fo: Format) -> Value:
    """``a * b`` rounded to ``fo`` (bf16 by bf16 into fp32 is exact but for the range)."""
    ua, ub = unpack(m, a, fa), unpack(m, b, fb)
    sign = ua.sign ^ ub.sign
    prod = wire(m, ua.sig * ub.sig, "f_prod")        # 1 <= value < 4, leading one on one of the top two bits
    top = fa.man + fb.man + 1
    high = prod[top]
    norm = Mux(high, prod, prod << 1)[:top + 1]
    exp = ua.exp.as_unsigned() + ub.exp + high - BIAS
    out = round_pack(m, sign, exp, norm, 0, fo)
    nan = ua.nan | ub.nan | (ua.inf & ub.zero) | (ua.zero & ub.inf)
    return Mux(nan, _nan(fo), Mux(ua.inf | ub.inf, _inf(fo, sign), Mux(ua.zero | ub.zero, 0, out)))


def div(m, a, b, fa: Format, fb: Format, fo: Format) -> Value:
    """``a / b`` rounded to ``fo``; ``x / 0`` is Inf of ``x``'s sign, ``0 / 0`` and ``Inf / Inf`` NaN."""
    ua, ub = unpack(m, a, fa), unpack(m, b, fb)
    sign = ua.sign ^ ub.sign
    man = max(fa.man, fb.man)
    num = Cat(Const(0, fo.man + 3), _widen(ua, man))
    den = wire(m, Mux(ub.zero, 1, _widen(ub, man)), "f_den")
    q = wire(m, num // den, "f_quot")                 # 2**(fo.man+2) <= q < 2**(fo.man+4)
    rem = num % den
    top = fo.man + 3
    high = q[top]
    norm = Mux(high, q, q << 1)[:top + 1]
    exp = ua.exp.as_unsigned() - ub.exp + BIAS + high - 1
    out = round_pack(m, sign, exp, norm, rem != 0, fo)
    nan = ua.nan | ub.nan | (ua.zero & ub.zero) | (ua.inf & ub.inf)
    # x / 0: Inf of x's sign (zero is unsigned); Inf / x: Inf; 0 / x and x / Inf: +0
    special = Mux(ub.zero, _inf(fo, ua.sign), Mux(ua.inf, _inf(fo, sign), 0))
    return Mux(nan, _nan(fo), Mux(ua.inf | ub.inf | ua.zero | ub.zero, special, out))


def _key(u: Unpacked, man: int) -> Value:
    """A signed key whose order is the values' order (zeros equal; NaN excluded by the caller)."""
    mag = Cat(_widen(u, man), u.exp, Const(0, 1)).as_signed()     # the top 0: room for the sign
    return Mux(u.sign & ~u.zero, -mag, mag)


def convert(m, a, fa: Format, fo: Format) -> Value:
    """``a`` in format ``fo``: exact widening, or rounding to nearest even (fp32 to bf16)."""
    u = unpack(m, a, fa)
    if fo.man >= fa.man:
        out = Mux(u.zero, 0, pack(u.sign, u.exp, Cat(Const(0, fo.man - fa.man), u.sig[:fa.man]), fo))
    else:
        out = round_pack(m, u.sign, u.exp, u.sig, 0, fo)
    return Mux(u.nan, _nan(fo), Mux(u.inf, _inf(fo, u.sign), out))


def fmax(m, a, b, fa: Format, fb: Format, fo: Format) -> Value:
    """The larger of ``a`` and ``b`` in ``fo`` (exact: ``fo`` is at least as wide as the operand taken); NaN
    if either is NaN."""
    ua, ub = unpack(m, a, fa), unpack(m, b, fb)
    man = max(fa.man, fb.man)
    a_wins = _key(ua, man) >= _key(ub, man)
    return Mux(ua.nan | ub.nan, _nan(fo), Mux(a_wins, convert(m, a, fa, fo), convert(m, b, fb, fo)))


def exp_bf16(m, x) -> Value:
    """``exp(x)`` of a bf16 element, the integer recipe of :func:`step_hdl.floats.exp_bf16` step by step."""
    u = unpack(m, x, BF16)
    e = u.exp
    s = Cat(Value.cast(x)[:7], Const(1, 1))              # the significand, implicit 1 (also for e == 0)
    shift = Mux(e > 141, 0, 141 - e.as_unsigned())[:8]
    shift = wire(m, Mux(shift > 63, 63, shift)[:6], "exp_shift")
    mag = wire(m, (s * LOG2E_Q23) >> shift, "exp_mag")   # up to 32 bits
    t = wire(m, Mux(u.sign, -mag.as_signed(), mag.as_signed()), "exp_t")
    n = t >> 16                                           # floor
    f = t[:16]
    i, r = f[10:16], f[:10]
    lo = wire(m, Array([Const(v, 18) for v in EXP_TABLE[:64]])[i], "exp_lo")
    hi = Array([Const(v, 18) for v in EXP_TABLE[1:]])[i]
    p = wire(m, (lo + (((hi - lo)[:18] * r) >> 10))[:18], "exp_p")    # 2**16 <= p < 2**17
    q, rem = p[9:18], p[:9]
    q = wire(m, (q + ((rem > 256) | ((rem == 256) & q[0])))[:10], "exp_q")
    carry = q[8]
    frac = Mux(carry, q[1:8], q[:7])
    biased = wire(m, n + carry + BIAS, "exp_biased")
    out = Mux(biased >= EMAX, Const(0x7F80, 16), Mux(biased <= 0, Const(0, 16), Cat(frac, biased[:8], Const(0, 1))))
    out = Mux(e >= 134, Mux(u.sign, 0, 0x7F80), out)
    out = Mux(e == 0, 0x3F80, out)
    out = Mux(u.inf, Mux(u.sign, 0, 0x7F80), out)
    return Mux(u.nan, _nan(BF16), out)


def silu_bf16(m, x) -> Value:
    """``x / (1 + exp(-x))`` of a bf16 element, each operation rounded to bf16; ``silu(-Inf) = +0``."""
    u = unpack(m, x, BF16)
    e = exp_bf16(m, Mux(u.nan, x, negate(x, BF16)))
    den = add(m, Const(0x3F80, 16), e, BF16, BF16, BF16)
    out = div(m, x, den, BF16, BF16, BF16)
    return Mux(u.inf & u.sign, 0, out)


def group_sum(m, terms) -> Value:
    """``(t0 + t1) + (t2 + t3)`` of four fp32 elements."""
    t0, t1, t2, t3 = terms
    return add(m, add(m, t0, t1, FP32, FP32, FP32), add(m, t2, t3, FP32, FP32, FP32), FP32, FP32, FP32)


def _padded(terms) -> list:
    """``terms`` (fp32 elements) with zeros up to whole groups of four."""
    terms = list(terms)
    return terms + [Const(0, 32)] * (-len(terms) % 4)


def group_sums(m, terms) -> list:
    """The :func:`group_sum` of each four of ``terms`` (fp32 elements; the last group padded with zeros): what a
    unit hands to a running sum that goes on over more terms (a float matmul's or row sum's pieces)."""
    terms = _padded(terms)
    return [group_sum(m, terms[k:k + 4]) for k in range(0, len(terms), 4)]


def fp32_sum(m, terms, acc=None) -> Value:
    """The running fp32 sum ``acc`` plus ``terms`` (fp32 elements) in the fixed order: groups of four
    (the last padded with zeros), each :func:`group_sum` added to the sum in index order."""
    terms = _padded(terms)
    acc = Const(0, 32) if acc is None else acc
    for k in range(0, len(terms), 4):
        acc = add(m, acc, group_sum(m, terms[k:k + 4]), FP32, FP32, FP32)
    return acc
