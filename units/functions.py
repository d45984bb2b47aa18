"""Hardware function library: combinational Amaranth twins of :mod:`step_hdl.functions`.

Each :class:`HwFn` builds, for one physical operand tile (or two), the output
tile's elements as Amaranth values, bit-exact with the numpy reference:

==============  =====  ==============================  ==============================  =====================
function        arity  operands -> result              registers (per program)         multipliers
==============  =====  ==============================  ==============================  =====================
``matmul``      2      ``[M,K] x [K,N]`` -> int32      ``transpose``, ``transpose_a``  ``M·K·N``
                       (``a`` as ``[K,M]`` with        (only where several modes
                       ``transpose_a``, ``b`` as       fit the tiles, see
                       ``[N,K]`` with ``transpose``)   :func:`matmul_modes`)
``add``/``sub`` 2      ``[R,C] . [R,C]`` -> int32      (a side of size 1 broadcasts)   0
``mul``         2      (as add)                                                        ``R·C``
``max``         2      (as add)                                                        0
``div``         2      (as add), floor division                                        0 (``R·C`` dividers)
``requantize``  1      int -> ``out_dtype``            ``shift`` (0..31)               0
``silu``        1      int8/int16, same type           ``frac`` (0..14)                ``R·C``
``exp``         1      int8/int16, same type           ``frac`` (0..14)                ``3·R·C`` (one by a constant)
``row_sum``     1      ``[R,C]`` -> ``[R,1]`` int32                                    0
``row_max``     1      ``[R,C]`` -> ``[R,1]`` same                                     0
``col_sum``     1      ``[R,C]`` -> ``[1,C]`` int32                                    0
``col_max``     1      ``[R,C]`` -> ``[1,C]`` same                                     0
``affine``      1      int -> int32                    ``scale``, ``offset`` (int32)   ``R·C`` (32x32)
==============  =====  ==============================  ==============================  =====================

``row_group_sums`` (float ``[R,C]`` -> ``[R,⌈C/4⌉]`` fp32 group sums, no registers, no multipliers) is
what a float row sum wider than the physical tile adds to its running sum.

All are purely combinational (a unit registers the result); matmul and the
row/column sums use balanced adder trees (depth ``ceil(log2 K)``). Multipliers are
counted per build (:attr:`MapParams.multipliers`); a folded matmul
(``MapParams.matmul_rows``) divides its count by the number of passes. Integer results
that the library defines as int32 wrap modulo 2**32 (the sum is truncated);
``requantize``/``silu``/``exp`` saturate. Broadcasting follows the library: a
side of size 1 of either operand is repeated along that side.

``div`` is one combinational signed divider per output element (Amaranth ``//``,
which floors like numpy's ``floor_divide``); a zero divisor gives 0 through an
explicit multiplexer (Amaranth defines ``x // 0 == 0`` too, but Verilog's ``/``
gives ``x``, so the RTL does not rely on the back end). Its result is exact
(``-2**31 // -1`` needs 33 bits) and then wrapped to int32 like the library's.

A matmul build supports the modes ``(transpose_a, transpose_b)`` under which the
physical tiles multiply to the build's output tile (:func:`matmul_modes`). The
output tile is that of the first fitting mode in the order (False, False),
(False, True), (True, False), (True, True), unless ``MapParams.matmul_transpose_a``
asks for a ``transpose_a`` (True) or plain (False) build: e.g. two ``[1, P]`` rows
give their ``[1, 1]`` inner product by default and their ``[P, P]`` outer product
(``a.T @ b``, ``K = 1``) with ``matmul_transpose_a=True`` (which, like ``False``,
also restricts the build to that ``transpose_a`` setting). A choice that only one
mode allows is wired; where both settings of ``transpose_b`` (or of
``transpose_a``) give the output tile (square tiles), the ``transpose`` (or
``transpose_a``) register selects per program.
"""

from __future__ import annotations

from amaranth.hdl import Array, Const, Mux, Value, signed

from step_hdl.errors import StepTypeError
import numpy as np

from step_hdl import floats as floats_ref
from step_hdl.floats import FP32, Format, fmt_of
from step_hdl.functions import EXP2_A, LOG2E_Q14, Fn, fn as make_fn
from step_hdl.types import DType, Tile, dtype as make_dtype

from . import floats as hf
from .floats import wire
from .layout import tile_elems
from .config import Reg
from .params import ParamError
from .pipeline import NO_PIPE

INT32 = make_dtype("int32")


# --------------------------------------------------------------------------- value helpers

def wrap32(v: Value) -> Value:
    """Low 32 bits of an exact integer, as int32 (what the library's wrap_int32 does)."""
    v = Value.cast(v)
    if len(v) < 32:
        return v.as_signed() if v.shape().signed else v
    return v[:32].as_signed()


def saturate(v: Value, dt: DType) -> Value:
    """Clamp an exact integer to the range of ``dt``."""
    return Mux(v > dt.max, Const(dt.max, signed(dt.bits)), Mux(v < dt.min, Const(dt.min, signed(dt.bits)), v))


def shift_mask(width: int, shift, dt: DType):
    """The thermometer mask of :func:`shift_parts` for ``width``-bit values: the bits from ``dt.bits - 1 +
    shift`` up (``shift`` an Amaranth value, or an int for the mask's value)."""
    if isinstance(shift, int):
        return (((1 << width) - 1) << (shift + dt.bits - 1)) & ((1 << width) - 1)
    return (Const((1 << width) - 1, width) << (shift + (dt.bits - 1)))[:width]


def shift_parts(x: Value, shift: Value, dt: DType, mask: Value | None = None) -> tuple:
    """``(low, fits, negative)`` of ``x >> shift`` (``x`` signed): its ``dt.bits`` low bits (Yosys keeps only
    the shifter's stages that reach them), whether it fits ``dt`` (the bits of ``x`` from ``dt.bits - 1 +
    shift`` up all copy its sign: one thermometer mask of the shift, :func:`shift_mask`, the same for every
    element of a tile; ``mask``: that mask already made, a register decoded from the shift's write) and its
    sign; :func:`clamp_parts` of them is ``saturate(x >> shift, dt)``. :func:`saturate` of the whole shift
    compares all its bits twice: a 4x4 int32 -> int8 requantize Map took 6,301 LUTs on ECP5 that way, 3,210
    this way."""
    x = x.as_signed()
    w, n = len(x), dt.bits
    if n >= w:
        return x >> shift, Const(1, 1), x[w - 1]    # nothing to clamp
    low = (x >> shift)[:n]
    if mask is None:
        mask = shift_mask(w, shift, dt)
    return low, ((x.as_unsigned() ^ x[w - 1].replicate(w)) & mask) == 0, x[w - 1]


def clamp_parts(low: Value, fits: Value, negative: Value, dt: DType) -> Value:
    """The saturated value of :func:`shift_parts`: ``low``, or the end of ``dt``'s range on the value's side."""
    n = dt.bits
    return Mux(fits, low.as_signed(), Mux(negative, Const(dt.min, signed(n)), Const(dt.max, signed(n))))


def smax(a: Value, b: Value) -> Value:
    return Mux(a > b, a, b)


def tree(values, op, levels=None):
    """Balanced reduction (a shallow adder / comparator tree); with ``levels``, only that many levels of it:
    the partial results, left to right."""
    values = list(values)
    while len(values) > 1 and levels != 0:
        nxt = [op(values[k], values[k + 1]) for k in range(0, len(values) - 1, 2)]
        if len(values) % 2:
            nxt.append(values[-1])
        values = nxt
        levels = None if levels is None else levels - 1
    return values if levels is not None else values[0]


class TileVal:
    """Elements of a physical tile as Amaranth values, element ``(r, c)`` at ``r·cols + c``."""

    def __init__(self, tile: Tile, elems):
        self.tile = tile
        self.rows, self.cols = int(tile.rows), int(tile.cols)
        self.elems = list(elems)
        assert len(self.elems) == self.rows * self.cols

    @classmethod
    def of(cls, tile: Tile, view) -> "TileVal":
        """The elements of a tile payload view (a stream's payload, with or without its ``short``)."""
        n, elems = int(tile.rows) * int(tile.cols), tile_elems(view)
        return cls(tile, [elems[k] for k in range(n)])

    def at(self, r: int, c: int) -> Value:
        """Element (r, c) with the library's broadcast of a size-1 side."""
        return self.elems[(r if self.rows > 1 else 0) * self.cols + (c if self.cols > 1 else 0)]


# --------------------------------------------------------------------------- functions

class HwFn:
    """One hardware function. ``regs`` are its per-program registers (shared by name across functions)."""

    name = ""
    arity = 1
    regs: tuple = ()
    #: the float formats its operands may have in hardware (bit for bit ``step_hdl.floats``); none: integers only
    float_formats: tuple = ()

    def check_floats(self, owner: str, *tiles) -> None:
        """A ParamError unless every float operand tile is of a format this function builds."""
        for t in tiles:
            if t is not None and not t.dtype.is_int and t.dtype.name not in self.float_formats:
                have = f"builds {', '.join(self.float_formats)} floats" if self.float_formats else "takes integers"
                raise ParamError(f"{owner}: function {self.name!r} on {t.dtype} tiles has no hardware (it {have})")

    def out_tile(self, a: Tile, b: Tile | None, out_dtype: DType | None) -> Tile:
        """The result tile type for operand tiles ``a`` (and ``b``); raises StepTypeError like the library."""
        f = make_fn(self.name, **self.type_params(a, b, out_dtype))
        args = (a,) if self.arity == 1 else (a, b)
        return f.spec.out_type(f, *args)

    def type_params(self, a, b, out_dtype) -> dict:
        return {}

    def reg_values(self, f: Fn, a: Tile, b: Tile | None) -> dict:
        """Register values for a program's function reference ``f``."""
        return {}

    def multipliers(self, a: Tile, b: Tile | None) -> int:
        return 0

    def stages(self, a: Tile) -> int:
        """Pipeline stages the function cuts its logic into on operand tiles ``a`` (``units.pipeline``):
        its ``build`` takes a ``pipe`` and calls ``pipe.cut`` that many times; 0: combinational."""
        return 0

    def decoded(self, a: Tile, out: Tile) -> dict:
        """Registers the function reads that are functions of its registers' values, decoded from their writes
        (``ConfigRegs.decoded``): ``{name: (register, fn, width, init)}``; ``build`` finds them in ``regs``."""
        return {}

    def build(self, m, a: TileVal, b: TileVal | None, out: Tile, regs) -> list:
        raise NotImplementedError


def fmt(t) -> Format:
    """The float format of a tile (or TileVal) of bf16 or fp32 elements."""
    return fmt_of(getattr(t, "tile", t).dtype)


class _Elementwise(HwFn):
    arity = 2
    float_formats = ("bf16", "fp32")
    #: ``(m, x, y, fa, fb, fo)``: the float operation (``units.floats``)
    float_op = None

    def op(self, x, y):
        raise NotImplementedError

    @staticmethod
    def cells(out):
        """``(row, col)`` of every output element, in the tile's order."""
        return [(r, c) for r in range(int(out.rows)) for c in range(int(out.cols))]

    def build(self, m, a, b, out, regs):
        cells = self.cells(out)
        if not out.dtype.is_int:
            return [type(self).float_op(m, a.at(r, c), b.at(r, c), fmt(a), fmt(b), fmt(out)) for r, c in cells]
        return [wrap32(self.op(a.at(r, c), b.at(r, c))) for r, c in cells]


class Add(_Elementwise):
    name = "add"
    float_op = hf.add

    def op(self, x, y):
        return x + y


class Sub(_Elementwise):
    name = "sub"
    float_op = hf.sub

    def op(self, x, y):
        return x - y


class Mul(_Elementwise):
    name = "mul"
    float_op = hf.mul

    def op(self, x, y):
        return x * y

    def multipliers(self, a, b):
        return int(self.out_tile(a, b, None).rows * self.out_tile(a, b, None).cols)

    def stages(self, a):
        # integers: the operands and the products registered (on an FPGA the multiplier blocks' own registers),
        # so the operands' route from the input FIFO and the products' route to the output register are each
        # a path of their own; the wrap to 32 bits is in front of the output register
        return 2 if a.dtype.is_int else 0

    def build(self, m, a, b, out, regs, pipe=NO_PIPE):
        if not out.dtype.is_int or not pipe.depth:
            return super().build(m, a, b, out, regs)
        cells = self.cells(out)
        prods = pipe.products([(a.at(r, c), b.at(r, c)) for r, c in cells], "mul")
        if prods is None:
            # each operand element is registered once (a broadcast side feeds several products)
            ops = pipe.cut(a.elems + b.elems, "mul_op")
            ra, rb = TileVal(a.tile, ops[:len(a.elems)]), TileVal(b.tile, ops[len(a.elems):])
            prods = pipe.cut([_wrapped(ra.at(r, c) * rb.at(r, c)) for r, c in cells], "mul_prod")
        return [wrap32(v) for v in prods]


class Max(_Elementwise):
    name = "max"
    float_op = hf.fmax

    def op(self, x, y):
        return smax(x, y)


class Div(_Elementwise):
    """Floor division, 0 for a zero divisor (one combinational divider per element); floats: ``a / b``."""

    name = "div"
    float_op = hf.div

    def op(self, x, y):
        return Mux(y == 0, 0, x // y)


MATMUL_MODES = ((False, False), (False, True), (True, False), (True, True))


def matmul_dims(a: Tile, b: Tile, transpose_a: bool, transpose_b: bool):
    """``(M, K, N)`` of the product in this mode, or None when the inner dimensions differ."""
    ak, am = (int(a.rows), int(a.cols)) if transpose_a else (int(a.cols), int(a.rows))
    bk, bn = (int(b.cols), int(b.rows)) if transpose_b else (int(b.rows), int(b.cols))
    return (am, ak, bn) if ak == bk else None


def matmul_modes(a: Tile, b: Tile, transpose_a: bool | None = False) -> list:
    """Modes under which the physical tiles ``a`` and ``b`` multiply.

    With ``transpose_a`` False (the default) or True: the ``transpose_b`` settings
    (bools) that fit with that ``transpose_a``. With ``transpose_a=None``: every
    fitting ``(transpose_a, transpose_b)`` pair, in the order of ``MATMUL_MODES``.
    """
    if transpose_a is None:
        return [mode for mode in MATMUL_MODES if matmul_dims(a, b, *mode) is not None]
    return [tb for tb in (False, True) if matmul_dims(a, b, transpose_a, tb) is not None]


class MatMul(HwFn):
    """``[M,K] x [K,N]`` (``a`` as ``[K,M]`` with ``transpose_a``, ``b`` as ``[N,K]`` with ``transpose``),
    fully parallel: ``M·K·N`` multipliers.

    ``transpose_a`` (None, True or False) is the build's structural preference
    (``MapParams.matmul_transpose_a``): None supports every fitting mode that gives
    the output tile of the first fitting one; True (False) only the fitting modes
    with (without) ``transpose_a`` that give the output tile of the first of them
    (:meth:`build_modes`).
    """

    name = "matmul"
    arity = 2
    regs = (Reg("transpose", 1, 0, doc="matmul: take the second operand as [N, K]"),
            Reg("transpose_a", 1, 0, doc="matmul: take the first operand as [K, M]"))
    float_formats = ("bf16", "fp32")

    def __init__(self, transpose_a: bool | None = None, groups: bool = False):
        self.transpose_a = transpose_a
        self.groups = groups

    def build_modes(self, a: Tile, b: Tile) -> list:
        """The ``(transpose_a, transpose_b)`` modes this build computes on physical tiles ``a``, ``b``."""
        fits = matmul_modes(a, b, None)
        pick = [mode for mode in fits if self.transpose_a is None or mode[0] == self.transpose_a]
        if not pick:
            return []
        out = matmul_dims(a, b, *pick[0])[::2]          # (M, N) of the build's output tile
        return [mode for mode in pick if matmul_dims(a, b, *mode)[::2] == out]

    def _choice(self, a, b):
        modes = self.build_modes(a, b)
        return modes, sorted({ta for ta, _ in modes}), sorted({tb for _, tb in modes})

    def type_params(self, a, b, out_dtype):
        # a float matmul's result format (dtype) or its group sums (groups): as the node asks
        extra = ({"groups": True} if self.groups else
                 {"dtype": out_dtype.name} if out_dtype is not None and not out_dtype.is_int else {})
        modes = self.build_modes(a, b)
        if not modes:
            if self.transpose_a is None:
                return {"transpose_b": False, **extra}
            return {"transpose_a": self.transpose_a, "transpose_b": False, **extra}  # the type rule: misfit
        return {"transpose_a": modes[0][0], "transpose_b": modes[0][1], **extra}

    def reg_values(self, f, a, b):
        mode = (bool(f.param("transpose_a")), bool(f.param("transpose_b")))
        modes, tas, tbs = self._choice(a, b)
        if mode not in modes:
            fits = [f"(transpose_a={ta}, transpose_b={tb})" for ta, tb in modes]
            raise ParamError(f"matmul with transpose_a={mode[0]}, transpose_b={mode[1]} is not built for the "
                             f"physical tiles {a} x {b}; this build computes {', '.join(fits) or 'nothing'}")
        values = {}
        if len(tbs) > 1:
            values["transpose"] = int(mode[1])
        if len(tas) > 1:
            values["transpose_a"] = int(mode[0])
        return values

    def multipliers(self, a, b):
        modes = self.build_modes(a, b)
        if not modes:
            return 0
        m, k, n = matmul_dims(a, b, *modes[0])
        return m * k * n

    def stages(self, a):
        # integers: the operands (after the transpose multiplexers), the products and the adder tree's first
        # half are registered, the tree's second half is in front of the unit's output register
        return 3 if a.dtype.is_int else 0

    def build(self, m, a, b, out, regs, row_group=None, pipe=NO_PIPE):
        """All output elements; with ``row_group=(phase, g)`` only rows ``phase·g + r`` (``r < g``) of the
        product, ``phase`` a signal (a folded matmul's pass), the rows chosen by multiplexers; ``pipe``: the
        stages of :meth:`stages` (not with ``row_group``)."""
        modes, tas, tbs = self._choice(a.tile, b.tile)
        m_dim, k_dim, n_dim = matmul_dims(a.tile, b.tile, *modes[0])

        def element(t, modes, reg, r, c):   # element (r, c) of operand t as the product reads it
            plain, trans = t.elems[r * t.cols + c] if r < t.rows and c < t.cols else None, \
                t.elems[c * t.cols + r] if c < t.rows and r < t.cols else None
            if len(modes) > 1:
                return Mux(regs[reg], trans, plain)
            return trans if modes[0] else plain

        def a_el(i, k):   # element (i, k) of the [M, K] operand
            return element(a, tas, "transpose_a", i, k)

        def b_el(k, j):   # element (k, j) of the [K, N] operand
            return element(b, tbs, "transpose", k, j)

        if row_group is None:
            rows = [[a_el(i, k) for k in range(k_dim)] for i in range(m_dim)]
        else:
            phase, g = row_group
            passes = m_dim // g
            rows = [[Array([a_el(p * g + r, k) for p in range(passes)])[phase] for k in range(k_dim)]
                    for r in range(g)]
        if not out.dtype.is_int:
            return self._float(m, rows, b_el, n_dim, k_dim, fmt(a), fmt(b), fmt(out))
        # the platform's registered multiplier blocks (an FPGA's DSPs) take the operand and product stages
        # where it has them; else the operands are cut once (each feeds a row or a column of products)
        prods = pipe.products([(a_row[k], b_el(k, j)) for a_row in rows for j in range(n_dim)
                               for k in range(k_dim)], "mm")
        if prods is None:
            ops = pipe.cut([x for row in rows for x in row]
                           + [b_el(k, j) for k in range(k_dim) for j in range(n_dim)], "mm_op")
            a_rows = [ops[i * k_dim:(i + 1) * k_dim] for i in range(len(rows))]
            b_ops = ops[len(rows) * k_dim:]
            prods = pipe.cut([_wrapped(a_row[k] * b_ops[k * n_dim + j]) for a_row in a_rows
                              for j in range(n_dim) for k in range(k_dim)], "mm_prod")
        else:
            prods = [_wrapped(p) for p in prods]
        # the tree's first half of levels (rounded up) before the cut: the products' long route from the
        # multiplier blocks ends at an adder and a register, the rest of the tree at the output register
        half = ((k_dim - 1).bit_length() + 1) // 2
        parts = [tree(prods[e * k_dim:(e + 1) * k_dim], lambda x, y: _wrapped(x + y), half)
                 for e in range(len(prods) // k_dim)]
        width = len(parts[0])
        sums = pipe.cut([v for part in parts for v in part], "mm_sum")
        return [wrap32(tree(sums[e * width:(e + 1) * width], lambda x, y: x + y))
                for e in range(len(parts))]

    def _float(self, m, rows, b_el, n_dim, k_dim, fa, fb, fo):
        """fp32 products of each output element, summed in the fixed order (``units.floats.fp32_sum``) and
        rounded once to ``fo``; with ``groups`` their group sums side by side instead (``[M, N · G]``)."""
        res = []
        for a_row in rows:
            for j in range(n_dim):
                prods = [hf.mul(m, a_row[k], b_el(k, j), fa, fb, FP32) for k in range(k_dim)]
                if self.groups:
                    res += hf.group_sums(m, prods)
                else:
                    res.append(hf.convert(m, hf.fp32_sum(m, prods), FP32, fo))
        return res


def _wrapped(v):
    """An integer product as the hardware keeps it: wrapped to 32 bits when wider."""
    return wrap32(v) if len(v) > 32 else v


class Requantize(HwFn):
    name = "requantize"
    regs = (Reg("shift", 5, 0, doc="requantize: arithmetic right shift"),)

    def type_params(self, a, b, out_dtype):
        return {"shift": 0, "dtype": (out_dtype or a.dtype).name}

    def reg_values(self, f, a, b):
        return {"shift": int(f.param("shift"))}

    def stages(self, a):
        return 1        # the shift's low bits and whether it fits; the clamp in front of the output register

    def decoded(self, a, out):
        # the shift's mask, the same for every element, a register: the path from the shift's register through
        # its adder and shifter into every element's comparison was the pipelined unit's critical path
        w = a.dtype.bits
        if out.dtype.bits >= w:
            return {}

        def mask(shift):
            return shift_mask(w, shift, out.dtype)
        return {"shift_mask": ("shift", mask, w, mask(self.regs[0].init))}

    def build(self, m, a, b, out, regs, pipe=NO_PIPE):
        mask = regs.get("shift_mask")
        parts = pipe.cut([v for x in a.elems for v in shift_parts(x, regs["shift"], out.dtype, mask)], "rq")
        return [clamp_parts(*parts[3 * k:3 * k + 3], out.dtype) for k in range(len(a.elems))]


def _silu_one(frac):
    """SiLU's 1.0 in fixed point of ``frac`` fractional bits (15 bits)."""
    return (Const(1, 1) << frac)[:15]


def _silu_upper(frac):
    """Where SiLU's ``h = (x >> 2) + one / 2`` goes above ``one``: ``x >> 2`` above ``one - one / 2``."""
    one = _silu_one(frac)
    return one - (one >> 1)


def _silu_neg_half(frac):
    """Where SiLU's ``h`` goes below 0: ``x >> 2`` below ``-(one / 2)`` (16 bits, signed)."""
    return -(_silu_one(frac) >> 1)


def _frac_reg():
    return Reg("frac", 4, 8, doc="silu/exp: fractional bits (0..14)")


class Relu(HwFn):
    """``max(x, 0)``: a sign test and a multiplexer per element, no multiplier (floats: a comparator)."""

    name = "relu"
    float_formats = ("bf16", "fp32")

    def build(self, m, a, b, out, regs):
        if not out.dtype.is_int:
            return [hf.fmax(m, x, Const(0, fmt(a).bits), fmt(a), fmt(a), fmt(out)) for x in a.elems]
        return [Mux(x < 0, 0, x) for x in a.elems]


class Silu(HwFn):
    """``h = clamp((x >> 2) + one/2, 0, one)``, ``y = sat((x·h) >> frac)``: one multiplier per element.
    bf16: ``x / (1 + exp(-x))`` (``units.floats.silu_bf16``)."""

    name = "silu"
    regs = (_frac_reg(),)
    float_formats = ("bf16",)

    def reg_values(self, f, a, b):
        return {"frac": int(f.param("frac"))}

    def multipliers(self, a, b):
        return int(a.rows) * int(a.cols)

    def stages(self, a):
        return 4 if a.dtype.is_int else 0       # x with (x >> 2) + 1/2, then with h; the product; shifted

    def decoded(self, a, out):
        # (pipelined) ``one`` and the clamp's bounds on x >> 2 (hr = (x >> 2) + one / 2 is below 0 below
        # -one / 2, above one above one - one / 2) are registers decoded from frac's writes: no shifter or
        # adder on the clamp's path into the multipliers' operand registers
        if not a.dtype.is_int:
            return {}
        one = 1 << self.regs[0].init
        return {"silu_one": ("frac", _silu_one, 15, one),
                "silu_upper": ("frac", _silu_upper, 15, one - one // 2),
                "silu_neg_half": ("frac", _silu_neg_half, 16, -(one // 2) & 0xFFFF)}

    def build(self, m, a, b, out, regs, pipe=NO_PIPE):
        if not out.dtype.is_int:
            return [hf.silu_bf16(m, x) for x in a.elems]
        frac = regs["frac"]
        if pipe.depth:
            # whether hr is below 0 or above one: x >> 2 against registers, registered with hr (stage 2 only
            # selects h)
            one, upper, neg_half = regs["silu_one"], regs["silu_upper"], regs["silu_neg_half"].as_signed()
            bounds = lambda x: ((x >> 2) < neg_half, (x >> 2) > upper)     # noqa: E731
        else:
            one = wire(m, _silu_one(frac), "silu_one")
            bounds = lambda x: ()                                          # noqa: E731
        half = one >> 1
        staged = pipe.cut([v for k, x in enumerate(a.elems)
                           for v in (x, wire(m, (x >> 2) + half, f"silu_hr{k}"), *bounds(x))], "silu_xhr")
        per = len(staged) // len(a.elems)
        pairs = []
        for x, hr, *flags in (staged[per * k:per * (k + 1)] for k in range(len(a.elems))):
            low, high = flags or (hr < 0, hr > one)
            pairs.append((x, Mux(low, 0, Mux(high, one, hr))[:15]))                        # h: 0..one
        # x and h registered, then their product: in the platform's registered multipliers where it has them
        prods = pipe.products(pairs, "silu_xh")
        if prods is None:
            xh = pipe.cut([v for pair in pairs for v in pair], "silu_xh")
            prods = pipe.cut([xh[2 * k] * xh[2 * k + 1] for k in range(len(a.elems))], "silu_xh_prod")
        ys = pipe.cut([wire(m, x >> frac, f"silu_y{k}") for k, x in enumerate(prods)], "silu_y")
        return [saturate(y, out.dtype) for y in ys]


class Exp(HwFn):
    """``t = (x·LOG2E_Q14) >> 14``; ``2^t`` as ``2^n · (1 + f(A + Bf))`` (see ``exp_fixed``): three multipliers
    per element (one by a constant), two variable shifters."""

    name = "exp"
    regs = (_frac_reg(),)
    float_formats = ("bf16",)

    def reg_values(self, f, a, b):
        return {"frac": int(f.param("frac"))}

    def multipliers(self, a, b):
        return 3 * int(a.rows) * int(a.cols)

    def stages(self, a):
        return 3 if a.dtype.is_int else 0       # t; n, f and B·f; n and the polynomial; then the shift

    def build(self, m, a, b, out, regs, pipe=NO_PIPE):
        if not out.dtype.is_int:
            return [hf.exp_bf16(m, x) for x in a.elems]
        frac = regs["frac"]
        one = wire(m, (Const(1, 1) << frac)[:15], "exp_one")
        mask = (one - 1)[:15]
        a_rom = Array([Const(round(EXP2_A * (1 << k)), 15) for k in range(16)])
        b_rom = Array([Const((1 << k) - round(EXP2_A * (1 << k)), 15) for k in range(16)])
        ca, cb = wire(m, a_rom[frac], "exp_a"), wire(m, b_rom[frac], "exp_b")
        # named intermediates: each is evaluated once (keeps the Python simulator's code small)
        ts = pipe.cut([wire(m, (x * LOG2E_Q14) >> 14, f"exp_t{k}") for k, x in enumerate(a.elems)], "exp_t")
        nf = []
        for k, t in enumerate(ts):
            f = wire(m, (t.as_unsigned() & mask)[:15], f"exp_f{k}")
            nf += [wire(m, t >> frac, f"exp_n{k}"), f, wire(m, ((cb * f) >> frac)[:15], f"exp_bf{k}")]
        nf = pipe.cut(nf, "exp_nfb")
        np_ = []
        for k in range(len(ts)):
            n, f, bf = nf[3 * k:3 * k + 3]
            np_ += [n, wire(m, (one + ((f * (ca + bf)) >> frac))[:17], f"exp_p{k}")]
        np_ = pipe.cut(np_, "exp_np")
        res = []
        for k in range(len(ts)):
            n, p = np_[2 * k:2 * k + 2]
            rsh = Mux(n < -16, 16, -n)[:5]
            lsh = Mux(n > 15, 15, n)[:4]
            y = wire(m, Mux(n <= 0, p >> rsh, p << lsh), f"exp_y{k}")
            res.append(saturate(y, out.dtype))
        return res


class _AxisReduce(HwFn):
    """Adder (or max) trees along rows (``axis = 1``) or down columns (``axis = 0``); float sums in the fixed
    order (``units.floats.fp32_sum``, rounded once), float maxima a comparator tree (exact)."""

    axis, is_sum = 1, True
    float_formats = ("bf16", "fp32")

    def type_params(self, a, b, out_dtype):
        # a float sum's result format (dtype: fp32 keeps it unrounded), as the node asks
        return {"dtype": out_dtype.name} if self.is_sum and out_dtype is not None and not out_dtype.is_int else {}

    def build(self, m, a, b, out, regs):
        lines = ([[a.elems[r * a.cols + c] for c in range(a.cols)] for r in range(a.rows)] if self.axis == 1 else
                 [[a.elems[r * a.cols + c] for r in range(a.rows)] for c in range(a.cols)])
        if not out.dtype.is_int:
            fa, fo = fmt(a), fmt(out)
            if self.is_sum:
                return [hf.convert(m, hf.fp32_sum(m, [hf.convert(m, x, fa, FP32) for x in line]), FP32, fo)
                        for line in lines]
            return [tree(line, lambda x, y: hf.fmax(m, x, y, fa, fa, fo)) for line in lines]
        if self.is_sum:
            return [wrap32(tree(line, lambda x, y: x + y)) for line in lines]
        return [tree(line, smax) for line in lines]


class RowSum(_AxisReduce):
    name = "row_sum"


class RowMax(_AxisReduce):
    name, is_sum = "row_max", False


class RowGroupSums(HwFn):
    """The group sums along each row of a float tile (``units.floats.group_sum`` of each four elements, the
    last padded with zeros): what a float row sum wider than the physical tile adds to its running sum."""

    name = "row_group_sums"
    float_formats = ("bf16", "fp32")

    def build(self, m, a, b, out, regs):
        fa = fmt(a)
        return [g for r in range(a.rows)
                for g in hf.group_sums(m, [hf.convert(m, a.elems[r * a.cols + c], fa, FP32) for c in range(a.cols)])]


class ColSum(_AxisReduce):
    name, axis = "col_sum", 0


class ColMax(_AxisReduce):
    name, axis, is_sum = "col_max", 0, False


def _wrap_int(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


class Convert(HwFn):
    """A float tile in another format: wiring (bf16 to fp32) or a rounder per element (fp32 to bf16)."""

    name = "convert"
    float_formats = ("bf16", "fp32")

    def type_params(self, a, b, out_dtype):
        return {"dtype": (out_dtype or a.dtype).name}

    def build(self, m, a, b, out, regs):
        return [hf.convert(m, x, fmt(a), fmt(out)) for x in a.elems]


class Affine(HwFn):
    """``x·scale + offset`` wrapped to int32 (scale and offset are taken modulo 2**32, which gives
    the same wrapped result); on float tiles a float multiplier and adder per element
    (``units.floats``), the constants' bits in the tile's format held in the same registers."""

    name = "affine"
    float_formats = ("bf16", "fp32")
    regs = (Reg("scale", 32, 1, signed=True, doc="affine: scale (a float tile's: its bits in the tile's format)"),
            Reg("offset", 32, 0, signed=True, doc="affine: offset (a float tile's: its bits in the tile's format)"))

    def reg_values(self, f, a, b):
        if not a.dtype.is_int:
            fa = fmt(a)
            # the constant's bit pattern in the tile's format, as a signed 32-bit register value
            return {k: _wrap_int(int(floats_ref.to_bits(floats_ref.round_to(np.float64(f.param(k)), fa), fa)))
                    for k in ("scale", "offset")}
        return {"scale": _wrap_int(int(f.param("scale"))), "offset": _wrap_int(int(f.param("offset")))}

    def multipliers(self, a, b):
        return int(a.rows) * int(a.cols)

    def build(self, m, a, b, out, regs):
        if not a.tile.dtype.is_int:
            fa = fmt(a)
            scale, offset = regs["scale"].as_unsigned()[:fa.bits], regs["offset"].as_unsigned()[:fa.bits]
            return [hf.add(m, hf.mul(m, x, scale, fa, fa, fa), offset, fa, fa, fa) for x in a.elems]
        return [wrap32(wrap32(x * regs["scale"]) + regs["offset"]) for x in a.elems]


HW_FUNCTIONS: dict[str, HwFn] = {c.name: c() for c in (Add, Sub, Mul, Max, Div, MatMul, Requantize, Relu, Silu,
                                                        Exp, RowSum, RowMax, RowGroupSums, ColSum, ColMax,
                                                        Convert, Affine)}


def hw_fn(owner: str, name: str, matmul_transpose_a: bool | None = None, matmul_groups: bool = False) -> HwFn:
    """The hardware function ``name``; a matmul with a structural ``transpose_a`` preference or giving group
    sums is its own instance (see :class:`MatMul`)."""
    if name not in HW_FUNCTIONS:
        raise ParamError(f"{owner}: unsupported function {name!r}; hardware functions: {sorted(HW_FUNCTIONS)}")
    if name == "matmul" and (matmul_transpose_a is not None or matmul_groups):
        return MatMul(matmul_transpose_a, matmul_groups)
    return HW_FUNCTIONS[name]


def as_fn(owner: str, value) -> Fn:
    """A language function reference from a node parameter (``Fn`` or name)."""
    if isinstance(value, Fn):
        return value
    try:
        return make_fn(value)
    except StepTypeError as exc:
        raise ParamError(f"{owner}: {exc}") from None


# --------------------------------------------------------------------------- accumulator updates

UPDATES = ("add", "max", "add_groups", "retile_row")


def update_elems(m, name: str, state: TileVal, x: TileVal) -> list:
    """New state elements for an Accum/Scan ``add``/``max`` update (int32 state, broadcast element; a float
    state adds or compares in its format) or ``add_groups`` (a float state plus each of the element's ``G``
    group sums in order, ``units.floats.add``)."""
    out = []
    fs, fe = (fmt(state), fmt(x)) if not state.tile.dtype.is_int else (None, None)
    groups = x.cols // state.cols
    for r in range(state.rows):
        for c in range(state.cols):
            s = state.at(r, c)
            if name == "add_groups":
                for g in range(groups):
                    s = hf.add(m, s, x.elems[r * x.cols + c * groups + g], fs, fe, fs)
                out.append(s)
            elif fs is not None:
                out.append((hf.add if name == "add" else hf.fmax)(m, s, x.at(r, c), fs, fe, fs))
            else:
                e = x.at(r, c)
                out.append(wrap32(s + e) if name == "add" else smax(s, e))
    return out
