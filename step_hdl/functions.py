"""The function library: what ``fn`` of Map, Accum, Scan and FlatMap can be.

Every function has a numpy reference (:meth:`FnSpec.apply`), a type rule
(:meth:`FnSpec.out_type`) that rejects wrong operands at graph construction, and
a FLOP count per call (spec section 3: matmul ``2·m·k·n``; add/sub/mul/div 1 per
element; exp 4; SiLU 8; row and column sum/max 1 per input element; requantize 1
per element; pure data movement 0).

==================  =====  ==========================  ============================================
function            arity  operands -> result          notes
==================  =====  ==========================  ============================================
``matmul``          2      ``[m,k] x [k,n] -> [m,n]``  ``transpose_b``: b is ``[n,k]``;
                                                       ``transpose_a``: a is ``[k,m]`` (``a.T @ b``)
``add``, ``sub``    2      ``[R,C] . [R,C] -> [R,C]``  a side of size 1 of either operand broadcasts
``mul``, ``max``    2      (as add)
``div``             2      (as add)                    floats ``a / b``; integers floor division
``silu``, ``exp``   1      int8/int16 or float         fixed point with ``frac`` fractional bits
``relu``            1      ``[R,C] -> [R,C]``          ``max(x, 0)``, same type
``requantize``      1      int -> ``dtype``            arithmetic right ``shift``, then saturate
``row_sum``         1      ``[R,C] -> [R,1]``          int32 for integer tiles
``row_max``         1      ``[R,C] -> [R,1]``          same type
``row_group_sums``  1      ``[R,C] -> [R,⌈C/4⌉]``      float: the fixed-order sum's groups, fp32
``col_sum``         1      ``[R,C] -> [1,C]``          int32 for integer tiles
``col_max``         1      ``[R,C] -> [1,C]``          same type
==================  =====  ==========================  ============================================

(plus index/selector helpers ``affine``, ``sel_index``, ``keep_if_zero``, ``pair``,
the Accum update ``retile_row``, the inits ``zeros``/``lowest`` and the flat-map
functions ``retile_streamify``/``range``.)

Integer arithmetic is defined here once, bit for bit, so that the RTL can match
it exactly:

* ``add``/``sub``/``mul``/``div``/``matmul``/``row_sum``/``col_sum`` on integer
  tiles produce int32, computed exactly and wrapped modulo 2**32 (what a 32-bit
  accumulator does);
* integer ``div`` is floor division (numpy ``floor_divide``: the quotient is
  rounded toward minus infinity, ``-7 div 2 = -4``, ``7 div -2 = -4``), and a
  division by zero gives 0 (numpy's result too, without its warning; Amaranth's
  ``//`` defines the same); ``-2**31 div -1`` is ``2**31``, which wraps to
  ``-2**31``. See :func:`floor_div_int`;
* ``requantize(shift, dtype)`` is an arithmetic right shift (floor) followed by
  saturation to ``dtype``;
* ``silu`` and ``exp`` on int8/int16 treat values as fixed point with ``frac``
  fractional bits; their approximations are given in :func:`silu_fixed` and
  :func:`exp_fixed`;
* ``col_max`` of a tile without rows (``R = 0``, e.g. an empty packed tile) is
  the lowest value of the type (``-inf`` for floats), the identity of max.

Floating point (bf16, and fp32 where it accumulates) is defined bit for bit in
:mod:`step_hdl.floats`, and the functions here apply exactly those rules to float
tiles (:meth:`FnSpec.apply_float`): correctly rounded add, sub, mul and div (ties
to even), subnormals flushed, zero unsigned, NaN canonical; sums in fp32 in one
fixed order of groups of four; exp and SiLU on bf16 in integer arithmetic. Both
formats are held in float32 arrays. fp32 exp and SiLU (no RTL unit takes them)
are numpy's float32 results with the same flushing and NaN rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import sympy

from . import floats
from .errors import StepTypeError
from .types import DType, Index, Selector, Tile, as_dim, dim_str, dims_equal, dtype

INT32 = dtype("int32")


# --------------------------------------------------------------------------- numeric helpers

def wrap_int32(x: np.ndarray) -> np.ndarray:
    """Wrap exact integers (int64) to int32, as a 32-bit register does."""
    return (np.asarray(x, dtype=np.int64).astype(np.uint64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def saturate(x: np.ndarray, dt: DType) -> np.ndarray:
    """Clamp exact integers to the range of integer type ``dt``."""
    return np.clip(np.asarray(x, dtype=np.int64), dt.min, dt.max).astype(dt.numpy)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """Round values to bf16 by :func:`step_hdl.floats.round_to` (nearest even, subnormals flushed), as float32."""
    return floats.round_to(np.asarray(x, dtype=np.float64), floats.BF16)


def cast(x: np.ndarray, dt: DType) -> np.ndarray:
    """Represent ``x`` as a tile of element type ``dt`` (integers wrap to int32 only; floats round by
    :func:`step_hdl.floats.round_to`)."""
    if not dt.is_int:
        return floats.round_to(np.asarray(x, dtype=np.float64), floats.fmt_of(dt))
    if dt.name == "int32":
        return wrap_int32(x)
    return saturate(x, dt)


def floor_div_int(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact integer floor division ``a // b`` (rounded toward minus infinity), 0 where ``b == 0``.

    Operands broadcast as numpy does; the result is int64 (callers wrap it to int32).
    """
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
    zero = b == 0
    return np.where(zero, 0, np.floor_divide(a, np.where(zero, 1, b))).astype(np.int64)


def silu_fixed(x: np.ndarray, frac: int, dt: DType) -> np.ndarray:
    """Fixed-point SiLU, bit-exact definition.

    ``sigmoid(x) ≈ clamp(x/4 + 1/2, 0, 1)`` (a hard sigmoid with the true slope
    at 0), computed as ``h = clamp((x >> 2) + (1 << frac) / 2, 0, 1 << frac)``;
    then ``silu(x) = saturate((x * h) >> frac)``. Shifts are arithmetic (floor).
    """
    x = np.asarray(x, dtype=np.int64)
    one = 1 << frac
    h = np.clip((x >> 2) + (one >> 1), 0, one)
    return saturate((x * h) >> frac, dt)


#: the fixed-point exp's constants, public because the RTL exp unit (units.functions) builds its ROMs from
#: them: 2**f ≈ 1 + f·(A + B·f) on f in [0, 1), exact at both ends, max error about 0.4 % (A = 0.6565
#: minimises it); log2(e) in Q14
EXP2_A = 0.6565
EXP2_B = 1.0 - EXP2_A
LOG2E_Q14 = round(math.log2(math.e) * (1 << 14))


def exp_fixed(x: np.ndarray, frac: int, dt: DType) -> np.ndarray:
    """Fixed-point exp, bit-exact definition.

    With ``one = 1 << frac``: ``t = (x * round(log2(e)·2**14)) >> 14`` is ``x·log2(e)``;
    ``n = t >> frac`` (floor) and ``f = t - (n << frac)``;
    ``p = one + ((f * (A + ((B * f) >> frac))) >> frac)`` with
    ``A = round(0.6565·one)``, ``B = one - A`` approximates ``2**f``;
    the result is ``p >> -n`` for ``n <= 0`` and ``saturate(p << n)`` otherwise.
    """
    x = np.asarray(x, dtype=np.int64)
    one = 1 << frac
    a = round(EXP2_A * one)
    b = one - a
    t = (x * LOG2E_Q14) >> 14
    n = t >> frac
    f = t - (n << frac)
    p = one + ((f * (a + ((b * f) >> frac))) >> frac)
    neg = np.minimum(-n, 62)
    pos = np.minimum(n, 40)
    out = np.where(n <= 0, p >> neg, p << np.maximum(pos, 0))
    return saturate(out, dt)


# --------------------------------------------------------------------------- function objects

@dataclass(frozen=True)
class Fn:
    """A function reference with its parameters, as used in a graph (``fn('silu', frac=8)``)."""

    name: str
    params: tuple = field(default=())

    @property
    def spec(self) -> "FnSpec":
        return FUNCTIONS[self.name]

    def param(self, key, default=None):
        return dict(self.params).get(key, default)

    def to_json(self) -> dict:
        return {"fn": self.name, **{k: (dim_str(v) if isinstance(v, sympy.Expr) else v) for k, v in self.params}}

    def __str__(self) -> str:
        args = ", ".join(f"{k}={dim_str(v) if isinstance(v, sympy.Expr) else v}" for k, v in self.params)
        return f"{self.name}({args})" if args else self.name


def fn(name: str, **params) -> Fn:
    """Make a validated function reference, e.g. ``fn('requantize', shift=8, dtype='int16')``."""
    if isinstance(name, Fn):
        return name
    if name not in FUNCTIONS:
        raise StepTypeError(f"unknown function {name!r}; known functions: {', '.join(sorted(FUNCTIONS))}")
    spec = FUNCTIONS[name]
    missing = [p for p in spec.required if p not in params]
    extra = [p for p in params if p not in spec.required and p not in spec.optional]
    if missing:
        raise StepTypeError(f"function {name!r} needs parameter(s) {missing}")
    if extra:
        raise StepTypeError(f"function {name!r} has no parameter(s) {extra}; "
                            f"it takes {list(spec.required) + list(spec.optional)}")
    clean = spec.check_params(dict(params))
    return Fn(name, tuple(sorted(clean.items())))


def fn_from_json(obj) -> Fn:
    if isinstance(obj, str):
        return fn(obj)
    if not isinstance(obj, dict) or "fn" not in obj:
        raise StepTypeError(f"a function must be a name or {{'fn': name, ...}}, got {obj!r}")
    obj = dict(obj)
    return fn(obj.pop("fn"), **obj)


class FnSpec:
    """One library function. Subclasses define the type rule, numpy reference and cost."""

    name = ""
    arity = 1                # number of operands (0 for init functions)
    kind = "map"             # "map", "init" or "flatmap"
    required: tuple = ()
    optional: tuple = ()

    def check_params(self, params: dict) -> dict:
        return params

    def out_type(self, f: Fn, *ins):
        raise NotImplementedError

    def apply(self, f: Fn, *xs):
        raise NotImplementedError

    @property
    def has_float(self) -> bool:
        """Whether :meth:`apply_float` defines the function on float tiles (a subclass overrides it)."""
        return type(self).apply_float is not FnSpec.apply_float

    def apply_float(self, f: Fn, fmt: "floats.Format", *xs):
        """The result on float tiles (float32 arrays), rounded to ``fmt``, by :mod:`step_hdl.floats`."""
        raise NotImplementedError

    def flops(self, f: Fn, *ins) -> sympy.Expr:
        return sympy.Integer(0)

    def accum_type(self, f: Fn, state, elem, count):
        """State type after ``count`` updates (Accum); default: the state type is fixed."""
        out = self.out_type(f, state, elem)
        if out != state:
            raise StepTypeError(f"update function {f} turns state {state} into {out}; "
                                f"an Accum/Scan state must keep its type")
        return state


FUNCTIONS: dict[str, FnSpec] = {}


def _register(cls):
    FUNCTIONS[cls.name] = cls()
    return cls


def _tile(t, f: Fn, what="operand") -> Tile:
    if not isinstance(t, Tile):
        raise StepTypeError(f"function {f} needs a tile {what}, got {t}")
    return t


def _float_dtype_param(params: dict, name: str, what: str) -> dict:
    """Check a sum's optional ``dtype`` parameter (a float result's format) and store its canonical name."""
    if "dtype" in params:
        dt = dtype(params["dtype"])
        if dt.is_int:
            raise StepTypeError(f"{name}: dtype sets a float result's format, got {dt} (integer {what} are int32)")
        params["dtype"] = dt.name
    return params


def _binary_dtype(f: Fn, a: Tile, b: Tile) -> DType:
    """Integers give int32; floats of one format keep it; bf16 with fp32 gives fp32 (bf16 widens exactly)."""
    if a.dtype.is_int != b.dtype.is_int:
        raise StepTypeError(f"function {f} cannot combine {a.dtype} and {b.dtype}")
    if a.dtype.is_int:
        return INT32
    return a.dtype if a.dtype == b.dtype else dtype("fp32")


class _Elementwise(FnSpec):
    arity = 2
    cost = 1

    def out_type(self, f, a, b):
        a, b = _tile(a, f), _tile(b, f, "second operand")
        dt = _binary_dtype(f, a, b)
        rows = self._bcast(f, a.rows, b.rows, "rows")
        cols = self._bcast(f, a.cols, b.cols, "cols")
        return Tile(dt, rows, cols)

    @staticmethod
    def _bcast(f, x, y, what):
        if dims_equal(y, 1):
            return x
        if dims_equal(x, 1):
            return y
        if dims_equal(x, y) is False:
            raise StepTypeError(f"function {f}: operand {what} {dim_str(x)} and {dim_str(y)} "
                                f"differ (one of them may be 1 to broadcast)")
        return x

    def apply(self, f, a, b):
        if a.dtype.kind != "i":
            return self.apply_float(f, floats.FP32, a, b)
        return cast(self.op(a.astype(np.int64), b.astype(np.int64), INT32), INT32)

    def apply_float(self, f, fmt, a, b):
        return self.float_op(a, b, fmt)

    def flops(self, f, a, b):
        out = self.out_type(f, a, b)
        return self.cost * out.rows * out.cols


@_register
class Add(_Elementwise):
    """Element-wise ``a + b`` (one operand may be ``[R, 1]`` or ``[1, 1]`` to broadcast)."""

    name = "add"
    op = staticmethod(lambda a, b, dt: a + b)
    float_op = staticmethod(floats.add)


@_register
class Sub(_Elementwise):
    """Element-wise ``a - b`` (broadcasting as for add)."""

    name = "sub"
    op = staticmethod(lambda a, b, dt: a - b)
    float_op = staticmethod(floats.sub)


@_register
class Mul(_Elementwise):
    """Element-wise ``a * b`` (broadcasting as for add)."""

    name = "mul"
    op = staticmethod(lambda a, b, dt: a * b)
    float_op = staticmethod(floats.mul)


@_register
class Max(_Elementwise):
    """Element-wise maximum (broadcasting as for add)."""

    name = "max"
    op = staticmethod(lambda a, b, dt: np.maximum(a, b))
    float_op = staticmethod(floats.fmax)


@_register
class Div(_Elementwise):
    """Element-wise division (broadcasting as for add): ``a / b`` on floating-point tiles; on
    integer tiles floor division (rounded toward minus infinity) giving int32, and 0 where ``b`` is 0
    (see :func:`floor_div_int`)."""

    name = "div"
    op = staticmethod(lambda a, b, dt: floor_div_int(a, b))
    float_op = staticmethod(floats.div)


@_register
class MatMul(FnSpec):
    """``a @ b``: ``[m, k] x [k, n] -> [m, n]``; ``transpose_b=True`` takes ``b`` as ``[n, k]``,
    ``transpose_a=True`` takes ``a`` as ``[k, m]`` (``a.T @ b``; e.g. two ``[1, P]`` rows give their
    ``[P, P]`` outer product). Both may be set. Integer tiles give int32, wrapped.

    Float tiles are summed in fp32 in the fixed order (:mod:`step_hdl.floats`) and rounded once to the
    result's format: the operands' (bf16 with fp32: fp32), or ``dtype`` (``"fp32"`` keeps the sum unrounded
    for an accumulation after it). ``groups=True`` gives the group sums instead, ``[m, n · ceil(k / 4)]``
    fp32 (:func:`step_hdl.floats.matmul_groups`), which an Accum ``add_groups`` adds to its running sum: how
    the lowering splits a float matmul over physical tiles without changing its result."""

    name = "matmul"
    arity = 2
    optional = ("transpose_a", "transpose_b", "dtype", "groups")

    def check_params(self, params):
        params.setdefault("transpose_b", False)
        for k in ("transpose_a", "transpose_b", "groups"):
            if k in params and not isinstance(params[k], bool):
                raise StepTypeError(f"matmul: {k} must be true or false, got {params[k]!r}")
        # transpose_a=False is the default and is not stored: fn('matmul') keeps its name and JSON
        if params.get("transpose_a") is False:
            del params["transpose_a"]
        if params.get("groups") is False:
            del params["groups"]
        _float_dtype_param(params, "matmul", "products")
        if params.get("groups") and "dtype" in params:
            raise StepTypeError("matmul: groups=true gives fp32 group sums; it takes no dtype")
        return params

    def _dims(self, f, a, b):
        """``(a, b, m, k, n)``: the operand tiles and the product's dimensions."""
        a, b = _tile(a, f), _tile(b, f, "second operand")
        ak, am = (a.rows, a.cols) if f.param("transpose_a") else (a.cols, a.rows)
        bk, bn = (b.cols, b.rows) if f.param("transpose_b") else (b.rows, b.cols)
        if dims_equal(ak, bk) is False:
            raise StepTypeError(f"function {f}: inner dimensions differ: {a} x {b}")
        return a, b, am, ak, bn

    def out_type(self, f, a, b):
        a, b, m, k, n = self._dims(f, a, b)
        dt = _binary_dtype(f, a, b)
        if (f.param("groups") or f.param("dtype")) and dt.is_int:
            raise StepTypeError(f"function {f}: groups and dtype are for float tiles, got {a.dtype}")
        if f.param("groups"):
            k = as_dim(k)
            if not k.is_Integer:
                raise StepTypeError(f"function {f}: group sums need a static inner dimension, got {dim_str(k)}")
            return Tile(dtype("fp32"), m, n * -(-int(k) // floats.GROUP))
        return Tile(dtype(f.param("dtype")) if f.param("dtype") else dt, m, n)

    @staticmethod
    def _operands(f, a, b):
        """``a`` as ``[m, k]`` and ``b`` as ``[k, n]``."""
        return (a.T if f.param("transpose_a") else a), (b.T if f.param("transpose_b") else b)

    def apply(self, f, a, b):
        if a.dtype.kind != "i":
            return self.apply_float(f, floats.FP32, a, b)
        a, b = self._operands(f, a, b)
        return wrap_int32(a.astype(np.int64) @ b.astype(np.int64))

    def apply_float(self, f, fmt, a, b):
        if f.param("groups"):
            return floats.matmul_groups(*self._operands(f, a, b))
        return floats.matmul(*self._operands(f, a, b), fmt)

    def flops(self, f, a, b):
        _, _, m, k, n = self._dims(f, a, b)
        return 2 * m * k * n


class _Unary(FnSpec):
    arity = 1
    cost = 1

    def out_type(self, f, a):
        return _tile(a, f)

    def flops(self, f, a):
        a = _tile(a, f)
        return self.cost * a.rows * a.cols


@_register
class Relu(_Unary):
    """``max(x, 0)`` element-wise, in the operand's own type (integer tiles stay exact; floats as floats)."""

    name = "relu"

    def apply(self, f, a):
        if a.dtype.kind == "i":
            return np.maximum(a, 0).astype(a.dtype)
        return floats.relu(a, floats.FP32)

    def apply_float(self, f, fmt, a):
        return floats.relu(a, fmt)


def _frac_param(params, name):
    params.setdefault("frac", 8)
    if not isinstance(params["frac"], int) or not 0 <= params["frac"] <= 14:
        raise StepTypeError(f"{name}: frac must be an integer in 0..14, got {params['frac']!r}")
    return params


@_register
class Silu(_Unary):
    """SiLU ``x·sigmoid(x)``; fixed point on int8/int16 (see :func:`silu_fixed`)."""

    name = "silu"
    cost = 8
    optional = ("frac",)

    def check_params(self, params):
        return _frac_param(params, "silu")

    def out_type(self, f, a):
        a = _tile(a, f)
        if a.dtype.name == "int32":
            raise StepTypeError(f"function {f}: fixed-point {f.name} takes int8 or int16, got int32 "
                                f"(requantize first)")
        return a

    def apply(self, f, a):
        if a.dtype.kind == "i":
            return silu_fixed(a, f.param("frac"), _np_dtype(a))
        return self.apply_float(f, floats.FP32, a)

    def apply_float(self, f, fmt, a):
        if fmt is floats.BF16:
            return floats.silu_bf16(a)
        x = floats.read(a)
        with np.errstate(all="ignore"):
            return floats.round_to(np.where(x == -np.inf, 0.0, x / (1 + np.exp(-x))), fmt)


@_register
class Exp(_Unary):
    """``exp(x)``; fixed point on int8/int16 (see :func:`exp_fixed`)."""

    name = "exp"
    cost = 4
    optional = ("frac",)

    def check_params(self, params):
        return _frac_param(params, "exp")

    out_type = Silu.out_type

    def apply(self, f, a):
        if a.dtype.kind == "i":
            return exp_fixed(a, f.param("frac"), _np_dtype(a))
        return self.apply_float(f, floats.FP32, a)

    def apply_float(self, f, fmt, a):
        if fmt is floats.BF16:
            return floats.exp_bf16(a)
        with np.errstate(all="ignore"):
            return floats.round_to(np.exp(floats.read(a)), fmt)


def _np_dtype(a: np.ndarray) -> DType:
    return {np.dtype(np.int8): dtype("int8"), np.dtype(np.int16): dtype("int16"),
            np.dtype(np.int32): INT32}[a.dtype]


@_register
class Requantize(_Unary):
    """Arithmetic right shift by ``shift`` (floor), then saturate to ``dtype``."""

    name = "requantize"
    required = ("shift", "dtype")

    def check_params(self, params):
        if not isinstance(params["shift"], int) or not 0 <= params["shift"] <= 31:
            raise StepTypeError(f"requantize: shift must be an integer in 0..31, got {params['shift']!r}")
        dt = dtype(params["dtype"])
        if not dt.is_int:
            raise StepTypeError(f"requantize: dtype must be an integer type, got {dt}")
        params["dtype"] = dt.name
        return params

    def out_type(self, f, a):
        a = _tile(a, f)
        if not a.dtype.is_int:
            raise StepTypeError(f"function {f} takes integer tiles, got {a.dtype}")
        return Tile(dtype(f.param("dtype")), a.rows, a.cols)

    def apply(self, f, a):
        return saturate(a.astype(np.int64) >> f.param("shift"), dtype(f.param("dtype")))


@_register
class Convert(_Unary):
    """A float tile in another float format ``dtype``: exact from bf16 to fp32, rounded to nearest even
    from fp32 to bf16 (:func:`step_hdl.floats.round_to`). Integer tiles use ``requantize``."""

    name = "convert"
    required = ("dtype",)
    cost = 0

    def check_params(self, params):
        dt = dtype(params["dtype"])
        if dt.is_int:
            raise StepTypeError(f"convert: dtype must be a float type (bf16, fp32), got {dt}; integers use "
                                f"requantize")
        params["dtype"] = dt.name
        return params

    def out_type(self, f, a):
        a = _tile(a, f)
        if a.dtype.is_int:
            raise StepTypeError(f"function {f} takes float tiles, got {a.dtype} (integers use requantize)")
        return Tile(dtype(f.param("dtype")), a.rows, a.cols)

    def apply(self, f, a):
        return self.apply_float(f, floats.fmt_of(f.param("dtype")), a)

    def apply_float(self, f, fmt, a):
        return floats.round_to(floats.read(a), fmt)


class _AxisReduce(_Unary):
    """Sum or maximum along ``axis`` (1: along each row -> ``[R, 1]``; 0: down each column -> ``[1, C]``);
    sums of integer tiles are int32, wrapped; float sums in the fixed order, rounded once to the tile's
    format or, for a sum, to ``dtype`` (``"fp32"`` keeps it for an accumulation after it)."""

    axis, is_sum = 1, True

    @property
    def optional(self):
        return ("dtype",) if self.is_sum else ()

    def check_params(self, params):
        return _float_dtype_param(params, self.name, "sums")

    def out_type(self, f, a):
        a = _tile(a, f)
        dt = INT32 if a.dtype.is_int and self.is_sum else a.dtype
        if f.param("dtype"):
            if a.dtype.is_int:
                raise StepTypeError(f"function {f}: dtype is for float tiles, got {a.dtype}")
            dt = dtype(f.param("dtype"))
        return Tile(dt, a.rows, 1) if self.axis == 1 else Tile(dt, 1, a.cols)

    def apply_float(self, f, fmt, a):
        if self.is_sum:
            return floats.reduce_sum(a, self.axis, fmt)
        return floats.reduce_max(a, self.axis, fmt)

    def apply(self, f, a):
        if a.dtype.kind != "i":
            return self.apply_float(f, floats.FP32, a)
        if self.is_sum:
            return wrap_int32(a.astype(np.int64).sum(axis=self.axis, keepdims=True))
        if a.shape[self.axis] == 0:
            low = np.iinfo(a.dtype).min
            shape = (a.shape[0], 1) if self.axis == 1 else (1, a.shape[1])
            return np.full(shape, low, dtype=a.dtype)
        return a.max(axis=self.axis, keepdims=True)


@_register
class RowSum(_AxisReduce):
    """Row-wise sum: ``[R, C] -> [R, 1]`` (int32 for integer tiles)."""

    name = "row_sum"


@_register
class RowGroupSums(_Unary):
    """The fixed-order float sum's group sums along each row: ``[R, C]`` float -> ``[R, ceil(C / 4)]`` fp32,
    each ``(t0 + t1) + (t2 + t3)`` of four consecutive elements (:func:`step_hdl.floats.row_group_sums`).
    An Accum ``add_groups`` adds them to a running sum: how a float ``row_sum`` wider than the physical tile
    is lowered, bit for bit the logical sum."""

    name = "row_group_sums"

    def out_type(self, f, a):
        a = _tile(a, f)
        if a.dtype.is_int:
            raise StepTypeError(f"function {f} takes float tiles, got {a.dtype} (integer row sums are exact: "
                                f"row_sum)")
        return Tile(dtype("fp32"), a.rows, sympy.ceiling(as_dim(a.cols) / floats.GROUP))

    def apply(self, f, a):
        return self.apply_float(f, floats.FP32, a)

    def apply_float(self, f, fmt, a):
        return floats.row_group_sums(a)


@_register
class RowMax(_AxisReduce):
    """Row-wise maximum: ``[R, C] -> [R, 1]``."""

    name, is_sum = "row_max", False


@_register
class ColSum(_AxisReduce):
    """Column-wise sum: ``[R, C] -> [1, C]`` (int32 for integer tiles, wrapped)."""

    name, axis = "col_sum", 0


@_register
class ColMax(_AxisReduce):
    """Column-wise maximum: ``[R, C] -> [1, C]`` (no rows: the lowest value of the type)."""

    name, axis, is_sum = "col_max", 0, False


@_register
class Affine(_Unary):
    """``x·scale + offset``: on integer tiles (index arithmetic) exact and wrapped to int32, with integer
    ``scale`` and ``offset``; on float tiles in the tile's format, ``scale`` and ``offset`` (numbers) rounded to
    it first, the product rounded, then the sum (two roundings, :mod:`step_hdl.floats`)."""

    name = "affine"
    optional = ("scale", "offset")
    cost = 0

    def check_params(self, params):
        params.setdefault("scale", 1)
        params.setdefault("offset", 0)
        for k in ("scale", "offset"):
            v = params[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
                raise StepTypeError(f"affine: {k} must be a number (an integer for integer tiles), got {v!r}")
            if isinstance(v, float) and v.is_integer():
                params[k] = int(v)      # one spelling of a value: 2.0 is 2
        return params

    def out_type(self, f, a):
        a = _tile(a, f)
        if not a.dtype.is_int:
            return Tile(a.dtype, a.rows, a.cols)
        for k in ("scale", "offset"):
            if not isinstance(f.param(k), int):
                raise StepTypeError(f"function {f} on {a.dtype} tiles takes an integer {k}, got {f.param(k)!r} "
                                    f"(float constants are for float tiles)")
        return Tile(INT32, a.rows, a.cols)

    def flops(self, f, a):
        a = _tile(a, f)
        return sympy.Integer(0) if a.dtype.is_int else 2 * a.rows * a.cols

    def apply(self, f, a):
        if a.dtype.kind != "i":
            return self.apply_float(f, floats.FP32, a)
        return wrap_int32(a.astype(np.int64) * f.param("scale") + f.param("offset"))

    def apply_float(self, f, fmt, a):
        scale, offset = (floats.round_to(np.float64(f.param(k)), fmt) for k in ("scale", "offset"))
        return floats.add(floats.mul(floats.read(a), scale, fmt), offset, fmt)


@_register
class SelIndex(FnSpec):
    """Selector (one-hot) -> ``[1, 1]`` int32 index of its lowest set bit (-1 if none)."""

    name = "sel_index"

    def out_type(self, f, a):
        if not isinstance(a, Selector):
            raise StepTypeError(f"function {f} takes a selector, got {a}")
        return Index()

    def apply(self, f, a):
        idx = (a & -a).bit_length() - 1
        return np.array([[idx]], dtype=np.int32)


@_register
class KeepSelector(FnSpec):
    """Index flag -> 1-way selector: set where the flag is 0 (drops padded elements)."""

    name = "keep_if_zero"

    def out_type(self, f, a):
        a = _tile(a, f)
        if not a.dtype.is_int or not (dims_equal(a.rows, 1) and dims_equal(a.cols, 1)):
            raise StepTypeError(f"function {f} takes a [1, 1] integer flag, got {a}")
        return Selector(1)

    def apply(self, f, a):
        return 1 if int(a.reshape(-1)[0]) == 0 else 0


@_register
class Pair(FnSpec):
    """Two ``[1, 1]`` integers -> one ``[1, 2]`` int32 tile (e.g. start, count)."""

    name = "pair"
    arity = 2

    def out_type(self, f, a, b):
        for t in (a, b):
            t = _tile(t, f)
            if not t.dtype.is_int or not (dims_equal(t.rows, 1) and dims_equal(t.cols, 1)):
                raise StepTypeError(f"function {f} takes [1, 1] integers, got {t}")
        return Tile(INT32, 1, 2)

    def apply(self, f, a, b):
        return np.array([[int(a.reshape(-1)[0]), int(b.reshape(-1)[0])]], dtype=np.int32)


# --------------------------------------------------------------------------- accumulation

@_register
class RetileRow(FnSpec):
    """Accum update that appends the element's rows below the state (packs rows into a tile)."""

    name = "retile_row"
    arity = 2

    def out_type(self, f, state, elem):
        s, e = _tile(state, f, "state"), _tile(elem, f)
        if dims_equal(s.cols, e.cols) is False or s.dtype != e.dtype:
            raise StepTypeError(f"function {f}: cannot stack {e} under {s}")
        return Tile(s.dtype, s.rows + e.rows, s.cols)

    def accum_type(self, f, state, elem, count):
        self.out_type(f, state, elem)
        return Tile(state.dtype, state.rows + count * elem.rows, state.cols)

    def apply(self, f, state, elem):
        return np.concatenate([state, elem], axis=0)


@_register
class AddGroups(FnSpec):
    """Accum update: the float state ``[r, c]`` plus the group sums ``[r, c · G]`` of a matmul with
    ``groups=True``, added one after another (each rounded to the state's format): the running sum of
    the fixed-order float sum (:func:`step_hdl.floats.add_groups`)."""

    name = "add_groups"
    arity = 2

    def out_type(self, f, state, elem):
        s, e = _tile(state, f, "state"), _tile(elem, f)
        if s.dtype.is_int or e.dtype.is_int:
            raise StepTypeError(f"function {f} adds float group sums, got {e} into {s}")
        g = sympy.simplify(as_dim(e.cols) / as_dim(s.cols)) if not dims_equal(s.cols, 0) else None
        if dims_equal(s.rows, e.rows) is False or g is None or not (g.is_Integer and g >= 1):
            raise StepTypeError(f"function {f}: {e} is not [rows, G · cols] group sums of the state {s}")
        return s

    def apply(self, f, state, elem):
        return self.apply_float(f, floats.FP32, state, elem)

    def apply_float(self, f, fmt, state, elem):
        return floats.add_groups(state, elem, fmt)


@_register
class Zeros(FnSpec):
    """Init: a ``[rows, cols]`` tile of zeros (``rows`` may be 0 to start a RetileRow)."""

    name = "zeros"
    arity = 0
    kind = "init"
    required = ("rows", "cols", "dtype")

    def check_params(self, params):
        params["rows"] = as_dim(params["rows"])
        params["cols"] = as_dim(params["cols"])
        params["dtype"] = dtype(params["dtype"]).name
        return params

    def out_type(self, f):
        return Tile(dtype(f.param("dtype")), f.param("rows"), f.param("cols"))

    def apply(self, f, bindings=None, like=None):
        """The initial tile; a side that is still symbolic takes ``like``'s size."""
        size = []
        for side, key in enumerate(("rows", "cols")):
            d = as_dim(f.param(key)).subs(bindings or {})
            if not d.is_Integer and like is None:
                raise StepTypeError(f"init {f}: {key} {dim_str(d)} is not known")
            size.append(int(d) if d.is_Integer else like.shape[side])
        return np.zeros(size, dtype=dtype(f.param("dtype")).numpy)


@_register
class Lowest(Zeros):
    """Init: a tile filled with the lowest value of its type (start of a running max)."""

    name = "lowest"

    def apply(self, f, bindings=None, like=None):
        z = super().apply(f, bindings, like)
        dt = dtype(f.param("dtype"))
        return np.full_like(z, dt.min if dt.is_int else -np.inf)


# --------------------------------------------------------------------------- flat-map functions

@_register
class RetileStreamify(FnSpec):
    """FlatMap: a ``[R, C]`` tile -> a stream of its ``R`` rows (``[1, C]`` tiles)."""

    name = "retile_streamify"
    kind = "flatmap"

    def out_type(self, f, a):
        a = _tile(a, f)
        return Tile(a.dtype, 1, a.cols), (a.rows,)

    def apply(self, f, a):
        return [a[i:i + 1] for i in range(a.shape[0])]


@_register
class Range(FnSpec):
    """FlatMap: indices ``start + step·j`` for ``j < count``.

    The operand is a ``[1, 2]`` integer tile ``(start, count)`` (the count varies:
    a new ragged dimension), or a ``[1, 1]`` start with a static ``count``
    parameter (a new static dimension).
    """

    name = "range"
    kind = "flatmap"
    optional = ("step", "count")

    def check_params(self, params):
        params.setdefault("step", 1)
        params.setdefault("count", None)
        if not isinstance(params["step"], int):
            raise StepTypeError(f"range: step must be an integer, got {params['step']!r}")
        if params["count"] is not None and (not isinstance(params["count"], int) or params["count"] < 0):
            raise StepTypeError(f"range: count must be a non-negative integer, got {params['count']!r}")
        return params

    def out_type(self, f, a):
        a = _tile(a, f)
        width = 1 if f.param("count") is not None else 2
        if not a.dtype.is_int or dims_equal(a.cols, width) is not True or dims_equal(a.rows, 1) is not True:
            what = "[1, 1] integer start (count is a parameter)" if width == 1 else "[1, 2] integer tile (start, count)"
            raise StepTypeError(f"function {f} takes a {what}, got {a}")
        if width == 1:
            return Index(), (sympy.Integer(f.param("count")),)
        return Index(), None  # None: a new ragged dimension

    def apply(self, f, a):
        vals = [int(v) for v in a.reshape(-1)]
        start, count = (vals[0], f.param("count")) if f.param("count") is not None else vals
        if count <= 0:
            return []
        # indices wrap at 32 bits, like affine and the hardware's int32 adders (int64 arithmetic when it
        # fits, in one numpy operation: a KV range is thousands of rows; Python integers otherwise)
        step = f.param("step")
        last = start + step * (count - 1)
        if -2 ** 63 <= min(start, last) <= max(start, last) < 2 ** 63:
            return list(wrap_int32(start + step * np.arange(count, dtype=np.int64)).reshape(count, 1, 1))
        return [wrap_int32(np.array([[start + step * j]])) for j in range(count)]


# --------------------------------------------------------------------------- applying with types

class ShapeOnly:
    """A tile payload without values, for timing-only runs: shape and element type only.

    Functions on it return :class:`ShapeOnly` results of the shape their type
    rule gives, so data-dependent sizes (packed tiles, unpacked rows) stay exact
    while no arithmetic is done.
    """

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dt: DType):
        self.shape = tuple(int(x) for x in shape)
        self.dtype = dt

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * self.dtype.bytes

    def __getitem__(self, rows):
        n = len(range(*rows.indices(self.shape[0])))
        return ShapeOnly((n, self.shape[1]), self.dtype)

    def __eq__(self, other):
        return isinstance(other, ShapeOnly) and other.shape == self.shape and other.dtype == self.dtype

    def __repr__(self):
        return f"{self.dtype}{list(self.shape)}"


def _as_tile_type(x) -> Tile:
    if isinstance(x, ShapeOnly):
        return Tile(x.dtype, x.shape[0], x.shape[1])
    return Tile(_np_dtype(x) if x.dtype.kind == "i" else dtype("fp32"), x.shape[0], x.shape[1])


def _shape_only(f: Fn, out, xs) -> ShapeOnly:
    """Result shape of ``f`` on value-less tiles; the common functions without building types."""
    shapes = [x.shape for x in xs]
    name = f.name
    if name == "retile_row":
        shape = (shapes[0][0] + shapes[1][0], shapes[0][1])
    elif name == "matmul":
        shape = (shapes[0][1] if f.param("transpose_a") else shapes[0][0],
                 shapes[1][0] if f.param("transpose_b") else shapes[1][1])
    elif name in ("row_sum", "row_max"):
        shape = (shapes[0][0], 1)
    elif name in ("col_sum", "col_max"):
        shape = (1, shapes[0][1])
    elif f.spec.kind == "map" and name in ("add", "sub", "mul", "max", "div", "relu", "silu", "exp", "requantize", "convert"):
        shape = tuple(max(d) for d in zip(*shapes))
    else:
        t = f.spec.out_type(f, *(_as_tile_type(x) for x in xs))
        return ShapeOnly((t.rows, t.cols), out.dtype if isinstance(out, Tile) else t.dtype)
    return ShapeOnly(shape, out.dtype if isinstance(out, Tile) else xs[0].dtype)


def apply_typed(f: Fn, out: Tile, *xs):
    """Run ``f`` on payloads and represent the result in the declared output type."""
    if any(isinstance(x, ShapeOnly) for x in xs):
        return _shape_only(f, out, xs)
    if isinstance(out, Tile) and not out.dtype.is_int and f.spec.has_float:
        return f.spec.apply_float(f, floats.fmt_of(out.dtype), *xs)
    y = f.spec.apply(f, *xs)
    # what is left moves values without arithmetic (float results are already in their format)
    if isinstance(out, Tile) and isinstance(y, np.ndarray) and y.dtype != out.dtype.numpy:
        return cast(y, out.dtype)
    return y


__all__ = ["Fn", "fn", "fn_from_json", "FUNCTIONS", "FnSpec", "apply_typed", "ShapeOnly", "wrap_int32", "saturate",
           "round_bf16", "cast", "floor_div_int", "silu_fixed", "exp_fixed"]
