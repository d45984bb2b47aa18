"""Element types, dimensions and stream types of STeP.

Dimensions are sympy expressions of three kinds:

* **static**: an integer (``sympy.Integer``);
* **dynamic-regular**: an expression over ordinary symbols (``B``, ``N_expert3``),
  one value per program run, known only at run time;
* **ragged**: an expression over at least one :class:`Ragged` symbol, whose value
  differs per outer index. Ragged absorbs: any expression that contains a ragged
  symbol is ragged.

Each ragged symbol ``L`` has a companion ordinary symbol ``L_total`` (see
:func:`ragged_total`), the sum of its lengths over all outer indices, which is
what traffic and FLOP counts use (spec section 4).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Union

import numpy as np
import sympy

from .errors import StepTypeError

Dim = sympy.Expr


class Ragged(sympy.Symbol):
    """A ragged dimension: its length differs per outer index."""


def dyn(name: str) -> sympy.Symbol:
    """A dynamic-regular dimension symbol (non-negative integer)."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


def ragged(name: str) -> Ragged:
    """A ragged dimension symbol (non-negative integer per outer index)."""
    return Ragged(name, integer=True, nonnegative=True)


def ragged_total(sym: Ragged) -> sympy.Symbol:
    """The symbol for the sum of a ragged dimension's lengths over its outer indices."""
    return dyn(f"{sym.name}_total")


def ragged_max(sym: Ragged) -> sympy.Symbol:
    """The symbol for the largest length of a ragged dimension (sizes on-chip buffers)."""
    return dyn(f"{sym.name}_max")


def ragged_symbols(expr) -> list:
    return sorted((s for s in sympy.sympify(expr).free_symbols if isinstance(s, Ragged)), key=lambda s: s.name)


def sum_over(count: Dim, per_element: Dim) -> Dim:
    """``Σ per_element`` over ``count`` stream elements.

    When the per-element amount depends on a ragged length ``L`` (a tile whose
    size varies per element), the sum is taken exactly for amounts linear in
    ``L``: ``count·c(0) + a·L_total`` for ``c(L) = a·L + c(0)``. Otherwise the
    per-element amount is bounded with ``L_max``.
    """
    per_element = sympy.expand(sympy.sympify(per_element))
    rag = ragged_symbols(per_element)
    if not rag:
        return count * per_element
    base = per_element.subs({r: 0 for r in rag})
    total = count * base
    for r in rag:
        coeff = sympy.expand(per_element.coeff(r))
        rest = sympy.expand(per_element - base - sum(sympy.expand(per_element.coeff(x)) * x for x in rag))
        if ragged_symbols(coeff) or rest != 0:
            return count * to_max(per_element)
        total += coeff * ragged_total(r)
    return total


def to_max(expr) -> Dim:
    """Replace every ragged length by its maximum (an upper bound for buffer sizes)."""
    expr = sympy.sympify(expr)
    return expr.subs({r: ragged_max(r) for r in ragged_symbols(expr)})


def as_dim(value) -> Dim:
    """Convert an int, str or sympy expression to a dimension expression."""
    if isinstance(value, sympy.Expr):
        return value
    if isinstance(value, (bool, np.bool_)):
        raise StepTypeError(f"a dimension must be an integer or a symbol, got {value!r}")
    if isinstance(value, (int, np.integer)):
        if value < 0:
            raise StepTypeError(f"a dimension must be >= 0, got {value}")
        return sympy.Integer(int(value))
    if isinstance(value, str):
        return parse_dim(value)
    raise StepTypeError(f"a dimension must be an integer or a symbol, got {value!r}")


def parse_dim(text: str) -> Dim:
    """Parse a dimension written by :func:`dim_str` (round trip exact).

    Names ending in ``'`` are ragged (``L'``); all other names are dynamic-regular.
    """
    names = {}
    cleaned = text
    for token in sorted(set(_identifiers(text)), key=len, reverse=True):
        if token + "'" in text:
            names[token] = ragged(token)
            cleaned = cleaned.replace(token + "'", token)
        else:
            names.setdefault(token, dyn(token))
    try:
        expr = sympy.sympify(cleaned, locals={**names, **_DIM_FUNCTIONS})
    except (sympy.SympifyError, SyntaxError, TypeError, AttributeError):
        # sympy's own message quotes its parser's internals; say what a dimension may be instead
        raise StepTypeError(f"cannot parse dimension {text!r}: expected an integer >= 0, a name such as 'N' "
                            f"(ragged: \"L'\") or an expression of them such as '4*N' or 'ceiling(N/4)'") from None
    if not isinstance(expr, sympy.Expr):
        raise StepTypeError(f"cannot parse dimension {text!r}: not an expression")
    if expr.is_number and (not expr.is_integer or expr < 0):
        raise StepTypeError(f"a dimension must be a non-negative integer, got {text!r}")
    return expr


_DIM_FUNCTIONS = {"ceiling": sympy.ceiling, "floor": sympy.floor, "Max": sympy.Max, "Min": sympy.Min}


def _identifiers(text: str):
    word = ""
    for ch in text + " ":
        if ch.isalnum() or ch == "_":
            word += ch
        else:
            if word and not word[0].isdigit() and word not in _DIM_FUNCTIONS:
                yield word
            word = ""


def dim_str(d: Dim) -> str:
    """Text form of a dimension; ragged symbols get a trailing ``'``."""
    d = as_dim(d)
    text = sympy.sstr(d)
    for sym in sorted(d.free_symbols, key=lambda s: len(s.name), reverse=True):
        if isinstance(sym, Ragged):
            text = _replace_word(text, sym.name, sym.name + "'")
    return text


def _replace_word(text: str, word: str, new: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text.startswith(word, i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) \
                and (i + len(word) == len(text) or not (text[i + len(word)].isalnum() or text[i + len(word)] == "_")):
            out.append(new)
            i += len(word)
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def is_static(d: Dim) -> bool:
    return bool(as_dim(d).is_Integer)


def substitute(d, bindings: dict | None) -> Dim:
    """``d`` with the values of ``bindings`` substituted for its symbols, matched by name (keys may be names
    or symbols: the graph's dimension symbols carry assumptions that a plain ``Symbol(name)`` would not
    match). The one rule every layer uses to give dynamic sizes their values."""
    d = as_dim(d)
    if not bindings or d.is_Integer:
        return d
    names = {str(k): v for k, v in bindings.items()}
    return d.subs({s: names[s.name] for s in d.free_symbols if s.name in names})


def concrete(d, bindings: dict | None = None) -> int | None:
    """The integer value of ``d`` under ``bindings`` (:func:`substitute`), or ``None`` if it stays symbolic."""
    v = substitute(d, bindings)
    return int(v) if v.is_Integer else None


def is_ragged(d: Dim) -> bool:
    return any(isinstance(s, Ragged) for s in as_dim(d).free_symbols)


def dims_equal(a: Dim, b: Dim) -> bool | None:
    """True if provably equal, False if provably different, None if unknown."""
    a, b = as_dim(a), as_dim(b)
    if a == b:
        return True
    diff = a - b
    if diff.is_number:
        return bool(diff == 0)
    # expand settles polynomial forms; simplify (slow) only where rounding appears
    if sympy.expand(diff) == 0:
        return True
    if diff.has(sympy.ceiling, sympy.floor, sympy.Mod) and sympy.simplify(diff) == 0:
        return True
    return None


# --------------------------------------------------------------------------- element types

@dataclass(frozen=True)
class DType:
    """A numeric element type."""

    name: str
    bytes: int
    is_int: bool
    bits: int

    @property
    def numpy(self) -> np.dtype:
        return np.dtype({"fp32": np.float32, "bf16": np.float32, "int8": np.int8,
                         "int16": np.int16, "int32": np.int32}[self.name])

    @property
    def min(self) -> int:
        return -(1 << (self.bits - 1))

    @property
    def max(self) -> int:
        return (1 << (self.bits - 1)) - 1

    def __str__(self) -> str:
        return self.name


DTYPES = {
    "fp32": DType("fp32", 4, False, 32),
    "bf16": DType("bf16", 2, False, 16),
    "int8": DType("int8", 1, True, 8),
    "int16": DType("int16", 2, True, 16),
    "int32": DType("int32", 4, True, 32),
}


def dtype(name) -> DType:
    """Look up an element type by name (``fp32``, ``bf16``, ``int8``, ``int16``, ``int32``)."""
    if isinstance(name, DType):
        return name
    try:
        return DTYPES[name]
    except (KeyError, TypeError):
        raise StepTypeError(f"unknown element type {name!r}; expected one of {sorted(DTYPES)}") from None


@dataclass(frozen=True)
class Tile:
    """A ``[rows, cols]`` tile of a numeric type; either side may be dynamic."""

    dtype: DType
    rows: Dim
    cols: Dim

    def __post_init__(self):
        object.__setattr__(self, "dtype", dtype(self.dtype))
        object.__setattr__(self, "rows", as_dim(self.rows))
        object.__setattr__(self, "cols", as_dim(self.cols))

    @property
    def nbytes(self) -> Dim:
        return self.rows * self.cols * self.dtype.bytes

    @property
    def elements(self) -> Dim:
        return self.rows * self.cols

    def __str__(self) -> str:
        return f"{self.dtype}[{dim_str(self.rows)},{dim_str(self.cols)}]"


def Index(dt: str = "int32") -> Tile:
    """A small integer (address, index, length): a ``[1, 1]`` integer tile."""
    return Tile(dtype(dt), 1, 1)


@dataclass(frozen=True)
class Selector:
    """A multi-hot vector over ``n`` choices (routing decisions)."""

    n: int

    def __post_init__(self):
        if not isinstance(self.n, int) or self.n < 1:
            raise StepTypeError(f"a Selector needs n >= 1 choices, got {self.n!r}")

    @property
    def nbytes(self) -> Dim:
        return sympy.Integer(math.ceil(self.n / 8))

    def __str__(self) -> str:
        return f"sel[{self.n}]"


@dataclass(frozen=True)
class BufferRef:
    """A read-only handle to a buffer in on-chip memory.

    ``dtype`` is the element type held and ``shape`` the buffered chunk's shape
    (outermost first), which may be dynamic.
    """

    dtype: "ElementType"
    shape: tuple

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(as_dim(d) for d in self.shape))

    @property
    def nbytes(self) -> Dim:
        """Bytes of the buffer the handle points to (not of the handle)."""
        return elements_of(self.shape) * self.dtype.nbytes

    def __str__(self) -> str:
        return f"buf<{self.dtype}>[{', '.join(dim_str(d) for d in self.shape)}]"


@dataclass(frozen=True)
class TupleType:
    """A tuple of element types (the output of Zip)."""

    items: tuple

    @property
    def nbytes(self) -> Dim:
        return sum((t.nbytes for t in self.items), sympy.Integer(0))

    def __str__(self) -> str:
        return "(" + ", ".join(str(t) for t in self.items) + ")"


ElementType = Union[Tile, Selector, BufferRef, TupleType]


def elements_of(shape) -> Dim:
    """Number of elements in a (possibly ragged) shape.

    Dimensions outside (and including) the innermost ragged dimension are
    replaced by that dimension's total symbol, since a ragged length summed over
    its outer indices is exactly that total.
    """
    shape = [as_dim(d) for d in shape]
    start = 0
    total = sympy.Integer(1)
    for i, d in enumerate(shape):
        rag = [s for s in d.free_symbols if isinstance(s, Ragged)]
        if rag:
            total = d.subs({s: ragged_total(s) for s in rag})
            start = i + 1
    for d in shape[start:]:
        total = total * d
    return total


@dataclass(frozen=True)
class StreamType:
    """The type of a stream: element type plus shape ``[D_r, ..., D_0]``."""

    dtype: ElementType
    shape: tuple

    def __post_init__(self):
        if len(self.shape) < 1:
            raise StepTypeError("a stream shape needs at least one dimension (rank 0 is [D0])")
        object.__setattr__(self, "shape", tuple(as_dim(d) for d in self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape) - 1

    @property
    def elements(self) -> Dim:
        return elements_of(self.shape)

    def with_shape(self, shape) -> "StreamType":
        return dataclasses.replace(self, shape=tuple(shape))

    def with_dtype(self, dt) -> "StreamType":
        return dataclasses.replace(self, dtype=dt)

    def shape_str(self) -> str:
        return "[" + ", ".join(dim_str(d) for d in self.shape) + "]"

    def __str__(self) -> str:
        return f"{self.shape_str()} of {self.dtype}"


# --------------------------------------------------------------------------- JSON forms

def type_to_json(t: ElementType) -> dict:
    if isinstance(t, Tile):
        return {"tile": t.dtype.name, "rows": dim_str(t.rows), "cols": dim_str(t.cols)}
    if isinstance(t, Selector):
        return {"selector": t.n}
    if isinstance(t, BufferRef):
        return {"buffer": type_to_json(t.dtype), "shape": [dim_str(d) for d in t.shape]}
    if isinstance(t, TupleType):
        return {"tuple": [type_to_json(i) for i in t.items]}
    raise StepTypeError(f"not an element type: {t!r}")


def type_from_json(obj: dict) -> ElementType:
    if not isinstance(obj, dict):
        raise StepTypeError(f"an element type must be a JSON object, got {obj!r}")
    try:
        return _type_from_json(obj)
    except StepTypeError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise StepTypeError(f"cannot read element type {obj!r} ({type(exc).__name__}: {exc})") from None


def _type_from_json(obj: dict) -> ElementType:
    if "tile" in obj:
        return Tile(dtype(obj["tile"]), as_dim(obj["rows"]), as_dim(obj["cols"]))
    if "selector" in obj:
        if not isinstance(obj["selector"], int):
            raise StepTypeError(f"selector width must be an integer, got {obj['selector']!r}")
        return Selector(obj["selector"])
    if "buffer" in obj:
        return BufferRef(type_from_json(obj["buffer"]), tuple(as_dim(d) for d in obj["shape"]))
    if "tuple" in obj:
        return TupleType(tuple(type_from_json(i) for i in obj["tuple"]))
    raise StepTypeError(f"unknown element type {obj!r}")
