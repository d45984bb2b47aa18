"""Hardware function library: combinational Amaranth twins of :mod:`step_hdl.functions`.

Each :class:`HwFn` builds, for one physical operand tile (or two), the output
tile's elements as Amaranth values, bit-exact with the numpy reference:

==============  =====  ============================  ==============================  =====================
function        arity  operands -> result            registers (per program)         multipliers
==============  =====  ============================  ==============================  =====================
``matmul``      2      ``[M,K] x [K,N]`` -> int32    ``transpose`` (b is [K,K])      ``M·K·N``
``add``/``sub`` 2      ``[R,C] . [R,C]`` -> int32    (a side of size 1 broadcasts)   0
``mul``         2      (as add)                                                      ``R·C``
``max``         2      (as add)                                                      0
``requantize``  1      int -> ``out_dtype``          ``shift`` (0..31)               0
``silu``        1      int8/int16, same type         ``frac`` (0..14)                ``R·C``
``exp``         1      int8/int16, same type         ``frac`` (0..14)                ``3·R·C`` (one by a constant)
``row_sum``     1      ``[R,C]`` -> ``[R,1]`` int32                                  0
``row_max``     1      ``[R,C]`` -> ``[R,1]`` same                                   0
``affine``      1      int -> int32                  ``scale``, ``offset`` (int32)   ``R·C`` (32x32)
==============  =====  ============================  ==============================  =====================

All are purely combinational (a unit registers the result); matmul and
row_sum use balanced adder trees (depth ``ceil(log2 K)``). Multipliers are
counted per build (:attr:`MapParams.multipliers`); a folded matmul
(``MapParams.matmul_rows``) divides its count by the number of passes. Integer results
that the library defines as int32 wrap modulo 2**32 (the sum is truncated);
``requantize``/``silu``/``exp`` saturate. Broadcasting follows the library: a
side of size 1 of either operand is repeated along that side.
"""

from __future__ import annotations

from amaranth.hdl import Array, Const, Mux, Signal, Value, signed

from step_hdl.errors import StepTypeError
from step_hdl.functions import _EXP2_A, _LOG2E_Q14, Fn, fn as make_fn
from step_hdl.types import DType, Tile, dtype as make_dtype

from .config import Reg
from .params import ParamError

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


def smax(a: Value, b: Value) -> Value:
    return Mux(a > b, a, b)


def tree(values, op):
    """Balanced reduction (a shallow adder / comparator tree)."""
    values = list(values)
    while len(values) > 1:
        nxt = [op(values[k], values[k + 1]) for k in range(0, len(values) - 1, 2)]
        if len(values) % 2:
            nxt.append(values[-1])
        values = nxt
    return values[0]


def _wire(m, value, name: str) -> Signal:
    """A combinational signal holding ``value`` (same shape)."""
    value = Value.cast(value)
    sig = Signal(value.shape(), name=name)
    m.d.comb += sig.eq(value)
    return sig


class TileVal:
    """Elements of a physical tile as Amaranth values, element ``(r, c)`` at ``r·cols + c``."""

    def __init__(self, tile: Tile, elems):
        self.tile = tile
        self.rows, self.cols = int(tile.rows), int(tile.cols)
        self.elems = list(elems)
        assert len(self.elems) == self.rows * self.cols

    @classmethod
    def of(cls, tile: Tile, view) -> "TileVal":
        n = int(tile.rows) * int(tile.cols)
        return cls(tile, [view[k] for k in range(n)])

    def at(self, r: int, c: int) -> Value:
        """Element (r, c) with the library's broadcast of a size-1 side."""
        return self.elems[(r if self.rows > 1 else 0) * self.cols + (c if self.cols > 1 else 0)]


# --------------------------------------------------------------------------- functions

class HwFn:
    """One hardware function. ``regs`` are its per-program registers (shared by name across functions)."""

    name = ""
    arity = 1
    regs: tuple = ()

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

    def build(self, m, a: TileVal, b: TileVal | None, out: Tile, regs) -> list:
        raise NotImplementedError


class _Elementwise(HwFn):
    arity = 2

    def op(self, x, y):
        raise NotImplementedError

    def build(self, m, a, b, out, regs):
        return [wrap32(self.op(a.at(r, c), b.at(r, c))) for r in range(int(out.rows)) for c in range(int(out.cols))]


class Add(_Elementwise):
    name = "add"

    def op(self, x, y):
        return x + y


class Sub(_Elementwise):
    name = "sub"

    def op(self, x, y):
        return x - y


class Mul(_Elementwise):
    name = "mul"

    def op(self, x, y):
        return x * y

    def multipliers(self, a, b):
        return int(self.out_tile(a, b, None).rows * self.out_tile(a, b, None).cols)


class Max(_Elementwise):
    name = "max"

    def op(self, x, y):
        return smax(x, y)


def matmul_modes(a: Tile, b: Tile) -> list[bool]:
    """The ``transpose_b`` settings under which ``a @ b`` is defined for these physical tiles."""
    return [t for t in (False, True) if (b.cols if t else b.rows) == a.cols]


class MatMul(HwFn):
    """``[M,K] x [K,N]`` (or ``b`` as ``[N,K]`` with ``transpose``), fully parallel: ``M·K·N`` multipliers."""

    name = "matmul"
    arity = 2
    regs = (Reg("transpose", 1, 0, doc="matmul: take the second operand as [N, K]"),)

    def type_params(self, a, b, out_dtype):
        modes = matmul_modes(a, b)
        return {"transpose_b": modes[0] if modes else False}

    def reg_values(self, f, a, b):
        t = bool(f.param("transpose_b"))
        if t not in matmul_modes(a, b):
            raise ParamError(f"matmul with transpose_b={t} does not fit the physical tiles {a} x {b}")
        return {"transpose": int(t)} if len(matmul_modes(a, b)) > 1 else {}

    def multipliers(self, a, b):
        o = self.out_tile(a, b, None)
        return int(o.rows) * int(a.cols) * int(o.cols)

    def build(self, m, a, b, out, regs):
        modes = matmul_modes(a.tile, b.tile)
        k_dim = a.cols
        res = []
        for i in range(int(out.rows)):
            for j in range(int(out.cols)):
                terms = []
                for k in range(k_dim):
                    if modes == [False]:
                        bkj = b.elems[k * b.cols + j]
                    elif modes == [True]:
                        bkj = b.elems[j * b.cols + k]
                    else:
                        bkj = Mux(regs["transpose"], b.elems[j * b.cols + k], b.elems[k * b.cols + j])
                    prod = a.elems[i * a.cols + k] * bkj
                    terms.append(wrap32(prod) if len(prod) > 32 else prod)
                res.append(wrap32(tree(terms, lambda x, y: x + y)))
        return res


class Requantize(HwFn):
    name = "requantize"
    regs = (Reg("shift", 5, 0, doc="requantize: arithmetic right shift"),)

    def type_params(self, a, b, out_dtype):
        return {"shift": 0, "dtype": (out_dtype or a.dtype).name}

    def reg_values(self, f, a, b):
        return {"shift": int(f.param("shift"))}

    def build(self, m, a, b, out, regs):
        return [saturate(x >> regs["shift"], out.dtype) for x in a.elems]


def _frac_reg():
    return Reg("frac", 4, 8, doc="silu/exp: fractional bits (0..14)")


class Silu(HwFn):
    """``h = clamp((x >> 2) + one/2, 0, one)``, ``y = sat((x·h) >> frac)``: one multiplier per element."""

    name = "silu"
    regs = (_frac_reg(),)

    def reg_values(self, f, a, b):
        return {"frac": int(f.param("frac"))}

    def multipliers(self, a, b):
        return int(a.rows) * int(a.cols)

    def build(self, m, a, b, out, regs):
        frac = regs["frac"]
        one = _wire(m, (Const(1, 1) << frac)[:15], "silu_one")
        half = one >> 1
        res = []
        for k, x in enumerate(a.elems):
            hr = (x >> 2) + half
            h = _wire(m, Mux(hr < 0, 0, Mux(hr > one, one, hr))[:15], f"silu_h{k}")  # 0..one
            y = _wire(m, (x * h) >> frac, f"silu_y{k}")
            res.append(saturate(y, out.dtype))
        return res


class Exp(HwFn):
    """``t = (x·LOG2E_Q14) >> 14``; ``2^t`` as ``2^n · (1 + f(A + Bf))`` (see ``exp_fixed``): three multipliers
    per element (one by a constant), two variable shifters."""

    name = "exp"
    regs = (_frac_reg(),)

    def reg_values(self, f, a, b):
        return {"frac": int(f.param("frac"))}

    def multipliers(self, a, b):
        return 3 * int(a.rows) * int(a.cols)

    def build(self, m, a, b, out, regs):
        frac = regs["frac"]
        one = _wire(m, (Const(1, 1) << frac)[:15], "exp_one")
        mask = (one - 1)[:15]
        a_rom = Array([Const(round(_EXP2_A * (1 << k)), 15) for k in range(16)])
        b_rom = Array([Const((1 << k) - round(_EXP2_A * (1 << k)), 15) for k in range(16)])
        ca, cb = _wire(m, a_rom[frac], "exp_a"), _wire(m, b_rom[frac], "exp_b")
        res = []
        for k, x in enumerate(a.elems):
            # named intermediates: each is evaluated once (keeps the Python simulator's code small)
            t = _wire(m, (x * _LOG2E_Q14) >> 14, f"exp_t{k}")
            n = _wire(m, t >> frac, f"exp_n{k}")
            f = _wire(m, (t.as_unsigned() & mask)[:15], f"exp_f{k}")
            bf = _wire(m, ((cb * f) >> frac)[:15], f"exp_bf{k}")
            p = _wire(m, (one + ((f * (ca + bf)) >> frac))[:17], f"exp_p{k}")
            rsh = Mux(n < -16, 16, -n)[:5]
            lsh = Mux(n > 15, 15, n)[:4]
            y = _wire(m, Mux(n <= 0, p >> rsh, p << lsh), f"exp_y{k}")
            res.append(saturate(y, out.dtype))
        return res


class RowSum(HwFn):
    name = "row_sum"

    def build(self, m, a, b, out, regs):
        return [wrap32(tree([a.elems[r * a.cols + c] for c in range(a.cols)], lambda x, y: x + y))
                for r in range(a.rows)]


class RowMax(HwFn):
    name = "row_max"

    def build(self, m, a, b, out, regs):
        return [tree([a.elems[r * a.cols + c] for c in range(a.cols)], smax) for r in range(a.rows)]


def _wrap_int(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


class Affine(HwFn):
    """``x·scale + offset`` wrapped to int32 (scale and offset are taken modulo 2**32, which gives
    the same wrapped result)."""

    name = "affine"
    regs = (Reg("scale", 32, 1, signed=True, doc="affine: scale"),
            Reg("offset", 32, 0, signed=True, doc="affine: offset"))

    def reg_values(self, f, a, b):
        return {"scale": _wrap_int(int(f.param("scale"))), "offset": _wrap_int(int(f.param("offset")))}

    def multipliers(self, a, b):
        return int(a.rows) * int(a.cols)

    def build(self, m, a, b, out, regs):
        return [wrap32(wrap32(x * regs["scale"]) + regs["offset"]) for x in a.elems]


HW_FUNCTIONS: dict[str, HwFn] = {c.name: c() for c in (Add, Sub, Mul, Max, MatMul, Requantize, Silu, Exp,
                                                        RowSum, RowMax, Affine)}


def hw_fn(owner: str, name: str) -> HwFn:
    if name not in HW_FUNCTIONS:
        raise ParamError(f"{owner}: unsupported function {name!r}; hardware functions: {sorted(HW_FUNCTIONS)}")
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

UPDATES = ("add", "max", "retile_row")


def update_elems(name: str, state: TileVal, x: TileVal) -> list:
    """New state elements for an Accum/Scan ``add``/``max`` update (int32 state, broadcast element)."""
    out = []
    for r in range(state.rows):
        for c in range(state.cols):
            s, e = state.at(r, c), x.at(r, c)
            out.append(wrap32(s + e) if name == "add" else smax(s, e))
    return out
