"""Floating point, bit for bit: bf16 operands with fp32 accumulation, as the hardware units compute them.

Two formats, both with IEEE single's 8-bit exponent (bias 127): **bf16** (7 stored significand bits,
the upper half of an IEEE single) and **fp32** (23 bits). Tiles hold either in float32 arrays (a bf16
value's low 16 bits are zero). Every rule below is one the RTL units (``units.floats``) implement, and
:mod:`step_hdl.functions` applies exactly these functions to bf16 tiles.

Rules shared by every operation
-------------------------------
* **Rounding**: the basic operations (add, sub, mul, div, conversions) are *correctly rounded*: the exact
  result is rounded to nearest, ties to even, at the format's precision as if the exponent were
  unbounded.
* **Subnormals are flushed**: an operand whose exponent field is 0 reads as zero; a result whose rounded
  magnitude is below the smallest normal (2**-126) is zero. (Tininess is judged after rounding, the
  simplest rule in hardware: the rounded exponent is compared once.)
* **Overflow**: a rounded magnitude above the largest finite value is Inf of the result's sign.
* **Zero is unsigned**: every zero result is ``+0`` and a ``-0`` operand reads as ``+0``. IEEE would give
  ``-0`` for e.g. ``-1 * 0`` or ``-0 + -0``; here no ``-0`` is ever produced, so padding a sum with zeros
  never changes it (the lowering pads partial tiles with zeros).
* **NaN** is canonical (``0x7FC0`` in bf16, ``0x7FC00000`` in fp32): any NaN operand, ``Inf - Inf``,
  ``0 * Inf``, ``0 / 0`` and ``Inf / Inf`` give it. ``x / 0`` is Inf of ``x``'s sign for ``x != 0``.
  Inf follows IEEE otherwise.
* **max** of two values is the larger; NaN if either is NaN.

Sums (matmul, row_sum, col_sum) accumulate in fp32 in one fixed order: products (matmul) are fp32
multiplications of the bf16 operands (exact unless they leave fp32's range); the terms are taken four
at a time in index order, each group summed as ``(t0 + t1) + (t2 + t3)``, and each group sum added to a
running fp32 sum that starts at ``+0``; a last group of fewer than four is padded with zeros. The sum is
rounded to the result's format once, at the end. The order does not depend on the physical tile size:
a unit that sees ``P`` of the terms per cycle (``P`` a multiple of 4) adds its ``P/4`` group sums to the
running sum one after another.

exp and SiLU (bf16 only)
------------------------
:func:`exp_bf16` is defined in integer arithmetic (a fixed-point ``2**t`` with a 65-entry table and
linear interpolation, then one rounding to bf16); :func:`silu_bf16` is ``x / (1 + exp(-x))`` from the
bf16 operations above, each rounded (with ``silu(-Inf) = 0``). Their accuracy against float64 over all
65,536 bf16 inputs is measured in ``tests/test_floats.py`` and ``docs/floats.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Format", "BF16", "FP32", "FORMATS", "fmt_of", "read", "round_to", "add", "sub", "mul", "div",
           "fmax", "relu", "exp_bf16", "silu_bf16", "fp32_sum", "matmul", "matmul_groups", "add_groups",
           "reduce_sum", "reduce_max",
           "to_bits", "from_bits", "EXP_TABLE", "LOG2E_Q23", "GROUP"]


@dataclass(frozen=True)
class Format:
    """A binary floating-point format with an 8-bit exponent (bias 127) and ``man`` stored significand bits."""

    name: str
    man: int

    @property
    def bits(self) -> int:
        return 9 + self.man

    @property
    def nan(self) -> int:
        """The canonical NaN's bit pattern."""
        return (0xFF << self.man | 1 << (self.man - 1))

    @property
    def neg_inf(self) -> int:
        """-Inf's bit pattern."""
        return 1 << (self.bits - 1) | 0xFF << self.man

    @property
    def max_finite(self) -> float:
        return float((2 - 2.0 ** -self.man) * 2.0 ** 127)


BF16 = Format("bf16", 7)
FP32 = Format("fp32", 23)
FORMATS = {"bf16": BF16, "fp32": FP32}
MIN_NORMAL = 2.0 ** -126
#: terms per group in a sum (see the module docstring)
GROUP = 4


def fmt_of(name) -> Format:
    """The :class:`Format` of an element type's name (``"bf16"`` or ``"fp32"``)."""
    return FORMATS[getattr(name, "name", name)]


def to_bits(x, fmt: Format) -> np.ndarray:
    """The bit patterns of values held in float32 arrays (uint16 for bf16, uint32 for fp32)."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32)
    return (b >> 16).astype(np.uint16) if fmt is BF16 else b.copy()


def from_bits(bits, fmt: Format) -> np.ndarray:
    """Values (float32 arrays) of bit patterns of ``fmt``."""
    b = np.asarray(bits).astype(np.uint32)
    return (b << 16 if fmt is BF16 else b).view(np.float32)


def read(x) -> np.ndarray:
    """Operands as the units read them: float64, subnormals and ``-0`` as ``+0``, NaN kept (float32 in)."""
    with np.errstate(invalid="ignore"):             # a signalling NaN pattern widens quietly
        x = np.asarray(x, dtype=np.float32).astype(np.float64)
    return np.where(np.abs(x) < MIN_NORMAL, 0.0, x)


def round_to(x, fmt: Format) -> np.ndarray:
    """Round float64 values to ``fmt`` by the rules above; float32 arrays out.

    ``x`` must be the exact result or a float64 rounding of it: rounding a float64 result (53 bits) again
    to 24 or 8 bits gives the correctly rounded result of add, sub, mul and div (53 >= 2 p + 2).
    """
    x = np.asarray(x, dtype=np.float64)
    bits = x.view(np.uint64)
    drop = np.uint64(52 - fmt.man)
    lsb = (bits >> drop) & np.uint64(1)
    with np.errstate(over="ignore"):
        rounded = ((bits + (np.uint64(1) << (drop - np.uint64(1))) - np.uint64(1) + lsb) >> drop) << drop
    r = rounded.view(np.float64)
    mag = np.abs(r)
    out = np.where(mag < MIN_NORMAL, 0.0, r)
    out = np.where(mag > fmt.max_finite, np.copysign(np.inf, x), out)
    out = np.where(np.isinf(x), x, out)
    out = out.astype(np.float32)                       # exact: out has at most 24 significant bits
    return np.where(np.isnan(x), from_bits(np.full(x.shape, fmt.nan), fmt), out).astype(np.float32)


def _op(fn, a, b, fmt: Format) -> np.ndarray:
    with np.errstate(all="ignore"):
        return round_to(fn(read(a), read(b)), fmt)


def add(a, b, fmt: Format = BF16) -> np.ndarray:
    """``a + b`` rounded to ``fmt`` (operands of either format; numpy broadcasting)."""
    return _op(np.add, a, b, fmt)


def sub(a, b, fmt: Format = BF16) -> np.ndarray:
    """``a - b`` rounded to ``fmt``."""
    return _op(np.subtract, a, b, fmt)


def mul(a, b, fmt: Format = BF16) -> np.ndarray:
    """``a * b`` rounded to ``fmt`` (a float64 product of two 24-bit significands is exact)."""
    return _op(np.multiply, a, b, fmt)


def div(a, b, fmt: Format = BF16) -> np.ndarray:
    """``a / b`` rounded to ``fmt``; ``x / 0`` is Inf of ``x``'s sign, ``0 / 0`` NaN."""
    return _op(np.divide, a, b, fmt)


def fmax(a, b, fmt: Format = BF16) -> np.ndarray:
    """The larger of ``a`` and ``b`` (NaN if either is NaN); exact."""
    return _op(np.maximum, a, b, fmt)


def relu(a, fmt: Format = BF16) -> np.ndarray:
    """``max(a, 0)``."""
    return fmax(a, np.float32(0), fmt)


# --------------------------------------------------------------------------- exp and SiLU

#: round(log2(e) · 2**23): 24 bits
LOG2E_Q23 = round(np.log2(np.e) * (1 << 23))
#: 2**(i/64) in Q16 for i = 0..64 (17 or 18 bits), the table of the fixed-point 2**f
EXP_TABLE = tuple(int(round(2.0 ** (i / 64) * (1 << 16))) for i in range(65))


def exp_bf16(x) -> np.ndarray:
    """``exp(x)`` of bf16 values, bit for bit as the exp unit computes it.

    With ``S`` the 8-bit significand (implicit 1 included) and ``E`` the exponent field of ``x``:

    1. special cases: NaN -> NaN, +Inf -> +Inf, -Inf -> +0, zero (or subnormal) -> 1.0; ``|x| >= 128``
       (``E >= 134``) -> +Inf for ``x > 0``, +0 for ``x < 0``;
    2. ``t = ±((S · LOG2E_Q23) >> (141 - E))``, ``x · log2(e)`` in fixed point with 16 fractional bits
       (the magnitude truncated, then the sign of ``x``);
    3. ``n = t >> 16`` (floor), ``f = t & 0xFFFF``; ``i = f >> 10``, ``r = f & 0x3FF``;
       ``p = T[i] + (((T[i+1] - T[i]) · r) >> 10)`` with ``T = EXP_TABLE``: ``2**(f / 2**16)`` in Q16,
       so ``2**16 <= p < 2**17``;
    4. round ``p`` to 8 significant bits (drop 9, ties to even; a carry to ``2**8`` increments ``n``);
       the result is ``q · 2**(n - 7)`` with ``q`` the rounded 8-bit significand: exponent field
       ``n + 127``, Inf at 255 or above, +0 at 0 or below.
    """
    bits = to_bits(x, BF16).astype(np.int64)
    sign = (bits >> 15) & 1
    e = (bits >> 7) & 0xFF
    s = (bits & 0x7F) | 0x80
    shift = np.clip(141 - e, 0, 63)
    mag = (s * LOG2E_Q23) >> shift
    t = np.where(sign == 1, -mag, mag)
    n = t >> 16
    f = t & 0xFFFF
    i, r = f >> 10, f & 0x3FF
    table = np.array(EXP_TABLE, dtype=np.int64)
    p = table[i] + (((table[i + 1] - table[i]) * r) >> 10)
    q, rem = p >> 9, p & 0x1FF
    q = q + ((rem > 256) | ((rem == 256) & ((q & 1) == 1)))
    carry = q >> 8
    q = np.where(carry == 1, q >> 1, q)
    biased = n + carry + 127
    out = np.where(biased >= 255, 0x7F80, (np.clip(biased, 0, 255) << 7) | (q & 0x7F))
    out = np.where(biased <= 0, 0, out)
    big = e >= 134
    out = np.where(big, np.where(sign == 1, 0, 0x7F80), out)
    out = np.where(e == 0, 0x3F80, out)                                   # zero and subnormals: exp(0) = 1
    is_nan = (e == 0xFF) & ((bits & 0x7F) != 0)
    out = np.where(e == 0xFF, np.where(sign == 1, 0, 0x7F80), out)         # +-Inf
    out = np.where(is_nan, BF16.nan, out)
    return from_bits(out, BF16).reshape(np.shape(x))


def silu_bf16(x) -> np.ndarray:
    """``silu(x) = x / (1 + exp(-x))`` from the bf16 operations, each rounded; ``silu(-Inf) = +0``."""
    x = np.asarray(x, dtype=np.float32)
    neg = np.where(np.isnan(x), x, -x).astype(np.float32)
    out = div(x, add(np.float32(1), exp_bf16(neg)))
    return np.where(x == -np.inf, np.float32(0), out).astype(np.float32)


# --------------------------------------------------------------------------- sums in fp32

def _group_sums(t) -> np.ndarray:
    """``(t0 + t1) + (t2 + t3)`` of each group of four along the last axis (its length a multiple of 4)."""
    pairs = add(t[..., 0::2], t[..., 1::2], FP32)
    return add(pairs[..., 0::2], pairs[..., 1::2], FP32)


def _running_sum(acc, groups) -> np.ndarray:
    """``acc`` plus each of ``groups`` (last axis) in order, every addition rounded to fp32 by the rules.

    numpy's ``add.accumulate`` adds float32 values one after another with IEEE rounding, which is this
    rule whenever no partial sum is subnormal (the operands are normal or +0, so no -0 arises, and NaN
    and Inf behave alike); where one is, the sum is redone one addition at a time.
    """
    seq = np.concatenate([np.asarray(acc, np.float32)[..., None], groups], axis=-1)
    with np.errstate(all="ignore"):
        part = np.add.accumulate(seq, axis=-1, dtype=np.float32)
    if not np.any((part != 0) & (np.abs(part) < MIN_NORMAL)):
        return round_to(part[..., -1].astype(np.float64), FP32)
    out = seq[..., 0]
    for j in range(1, seq.shape[-1]):
        out = add(out, seq[..., j], FP32)
    return out


def _padded(t) -> np.ndarray:
    """``t`` with zeros after its last axis up to a multiple of :data:`GROUP`."""
    pad = -t.shape[-1] % GROUP
    if not pad:
        return t
    return np.concatenate([t, np.zeros(t.shape[:-1] + (pad,), np.float32)], axis=-1)


def fp32_sum(terms, acc=None, axis: int = -1) -> np.ndarray:
    """The running fp32 sum ``acc`` (``+0`` if None) plus ``terms`` along ``axis`` in the fixed order.

    Groups of :data:`GROUP` consecutive terms (the last padded with zeros), each summed as
    ``(t0 + t1) + (t2 + t3)`` and added to ``acc`` in index order; every addition rounded to fp32.
    Continuing a sum over more terms (``fp32_sum(b, fp32_sum(a))``) equals summing them at once when
    ``a``'s length is a multiple of :data:`GROUP`.
    """
    t = np.moveaxis(np.asarray(terms, dtype=np.float32), axis, -1)
    t = _padded(t)
    acc = np.zeros(t.shape[:-1], np.float32) if acc is None else np.broadcast_to(acc, t.shape[:-1])
    return _running_sum(acc, _group_sums(t))


#: elements of the products array a matmul forms at once (bounds its memory)
_CHUNK = 1 << 22


def matmul(a, b, fmt: Format = BF16) -> np.ndarray:
    """``a @ b`` of ``[m, k]`` and ``[k, n]``: fp32 products, summed over ``k`` as :func:`fp32_sum` does,
    rounded to ``fmt`` once."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    rows = max(1, _CHUNK // max(1, k * n))
    out = np.empty((m, n), np.float32)
    bt = _padded(b.T)                                     # [n, k']
    for r in range(0, m, rows):
        ar = _padded(a[r:r + rows])                       # [rows, k']
        prods = mul(ar[:, None, :], bt[None, :, :], FP32)    # [rows, n, k']
        out[r:r + rows] = _running_sum(np.zeros(prods.shape[:-1], np.float32), _group_sums(prods))
    return round_to(out.astype(np.float64), fmt)


def matmul_groups(a, b) -> np.ndarray:
    """The group sums of ``a @ b`` (``[m, k]`` and ``[k, n]``): ``[m, n · G]`` fp32 with ``G = ceil(k / 4)``,
    element ``(i, j·G + g)`` the sum ``(t0 + t1) + (t2 + t3)`` of group ``g`` of the fp32 products ``a[i, :]
    · b[:, j]`` (the last group padded with zeros). A unit that multiplies ``k`` terms at a time hands these
    to the running sum (:func:`add_groups`), so a matmul split over physical tiles of ``k`` a multiple of 4
    is :func:`matmul` exactly."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    m, n = a.shape[0], b.shape[1]
    prods = mul(_padded(a)[:, None, :], _padded(b.T)[None, :, :], FP32)        # [m, n, k']
    return _group_sums(prods.reshape(m, n, -1, GROUP).reshape(m, n, -1)).reshape(m, -1)


def row_group_sums(a) -> np.ndarray:
    """The group sums along each row of ``a`` (``[r, c]``): ``[r, ceil(c / 4)]`` fp32, element ``(i, g)`` the sum
    ``(t0 + t1) + (t2 + t3)`` of group ``g`` of row ``i`` (the last group padded with zeros). A row sum split
    over physical tiles of ``c`` a multiple of 4 hands these to the running sum (:func:`add_groups`), which
    is :func:`reduce_sum` exactly."""
    return _group_sums(_padded(np.asarray(a, np.float32)))


def add_groups(acc, groups, fmt: Format = FP32) -> np.ndarray:
    """``acc`` (``[r, c]``) plus the group sums ``groups`` (``[r, c · G]``, the ``G`` of element ``(i, j)`` at
    ``j·G .. j·G + G - 1``) in order, each addition rounded to ``fmt``."""
    acc = np.asarray(acc, np.float32)
    g = np.asarray(groups, np.float32).reshape(acc.shape + (-1,))
    for j in range(g.shape[-1]):
        acc = add(acc, g[..., j], fmt)
    return acc


def reduce_sum(a, axis: int, fmt: Format = BF16) -> np.ndarray:
    """Sum along ``axis`` (keeping it as size 1) in the fixed order, rounded to ``fmt`` once."""
    s = fp32_sum(a, axis=axis)
    return round_to(np.expand_dims(s, axis).astype(np.float64), fmt)


def reduce_max(a, axis: int, fmt: Format = BF16) -> np.ndarray:
    """Maximum along ``axis`` (kept as size 1); NaN if any term is NaN, ``-Inf`` when there are no terms."""
    a = read(a)
    if a.shape[axis] == 0:
        shape = list(a.shape)
        shape[axis] = 1
        return np.full(shape, -np.inf, np.float32)
    return round_to(np.max(a, axis=axis, keepdims=True), fmt)
