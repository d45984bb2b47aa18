"""The one token layout, shared by the RTL, the testbench drivers and the Python models.

A token on a hardware stream is a struct of three fields, least significant first:

========  =====================  ==========================================
field     width                  meaning
========  =====================  ==========================================
payload   by stream type         a physical tile, a selector, an index, ...
stop      ``stop_bits(max_rank)``  0 = data token, ``k`` = stop token ``S_k``
done      1                      the stream's final token
========  =====================  ==========================================

Stop levels travel out of band, so a stop token costs exactly one transfer and
a data token carries no extra cycle. The payload of a stop or done token is
zero. :class:`TokenFormat` builds the Amaranth layout and converts between
interpreter :class:`~step_hdl.token.Token` objects and the flat integer a
simulator sees on ``<port>__payload``.

Payload formats:

* :class:`TileFormat`: ``rows × cols`` elements, element ``(r, c)`` at index
  ``r·cols + c`` (index 0 least significant); integers are two's complement,
  fp32 is IEEE single, bf16 the upper half of an IEEE single. That is also
  one word of off-chip memory (:meth:`TileFormat.pack`, ``width``). On a
  stream, a tile of ``rows > 1`` carries how many of its rows are valid:
  ``{elems, short}`` (:meth:`TileFormat.token_layout`), where ``short`` =
  ``rows`` − valid rows (``0``: a full tile) in ``(rows − 1).bit_length()``
  bits above the elements. Rows are valid from the top, so a count is enough
  (a mask would allow holes no lowering makes), and counting the *missing*
  rows makes 0 the full tile: a unit that never makes partial tiles (a load,
  a source) emits full ones without knowing the field. Rows past the count
  carry no meaning (zero where a tile is packed);
* :class:`SelectorFormat`: an ``n``-bit mask, bit ``i`` = choice ``i``;
* :class:`HandleFormat`: an unsigned buffer handle;
* :class:`TupleFormat`: the items' payloads side by side, item 0 lowest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from amaranth.hdl import signed, unsigned
from amaranth.lib import data

from step_hdl.token import DONE, Token, data as data_token, stop as stop_token
from step_hdl.types import BufferRef, DType, ElementType, Selector, Tile, TupleType, dtype as make_dtype

from .params import ParamError


def stop_bits(max_rank: int) -> int:
    """Bits needed for stop levels ``0..max_rank``."""
    if max_rank < 0:
        raise ParamError(f"max_rank must be >= 0, got {max_rank}")
    return max(1, int(max_rank).bit_length())


@dataclass(frozen=True)
class TileFormat:
    dtype: DType
    rows: int
    cols: int

    @property
    def elements(self) -> int:
        return self.rows * self.cols

    @property
    def width(self) -> int:
        return self.elements * self.dtype.bits

    def element_shape(self):
        return signed(self.dtype.bits) if self.dtype.is_int else unsigned(self.dtype.bits)

    def layout(self):
        return data.ArrayLayout(self.element_shape(), self.elements)

    @property
    def short_bits(self) -> int:
        """Bits of the token's ``short`` field (missing rows, ``0 .. rows - 1``); 0 for single rows."""
        return (self.rows - 1).bit_length()

    @property
    def token_width(self) -> int:
        return self.width + self.short_bits

    def token_layout(self):
        """The payload on a stream: the elements, and ``short`` (rows − valid rows) above them."""
        if not self.short_bits:
            return self.layout()
        return data.StructLayout({"elems": self.layout(), "short": unsigned(self.short_bits)})

    def pack_token(self, tile) -> int:
        """A tile of ``1 .. rows`` valid rows as a stream payload: its rows from the top, zeros below,
        ``short`` = the missing rows."""
        tile = np.asarray(tile)
        n = tile.shape[0] if tile.ndim == 2 else -1
        if tile.ndim != 2 or tile.shape[1] != self.cols or not 1 <= n <= self.rows:
            raise ValueError(f"tile of shape {tile.shape} does not fit the physical tile [{self.rows}, "
                             f"{self.cols}] (1 to {self.rows} rows of {self.cols})")
        full = np.zeros((self.rows, self.cols), dtype=tile.dtype)
        full[:n] = tile
        return self.pack(full) | (self.rows - n) << self.width

    def unpack_token(self, value: int) -> np.ndarray:
        """Inverse of :meth:`pack_token`: the valid rows."""
        short = value >> self.width
        if short >= self.rows:
            raise ValueError(f"short {short} leaves no valid row of a [{self.rows}, {self.cols}] tile")
        return self.unpack(value & ((1 << self.width) - 1))[:self.rows - short]

    def _bits_of(self, tile: np.ndarray) -> np.ndarray:
        dt = self.dtype
        if dt.is_int:
            return tile.astype(np.int64) & ((1 << dt.bits) - 1)
        raw = np.asarray(tile, dtype=np.float32).view(np.uint32).astype(np.int64)
        return raw >> 16 if dt.name == "bf16" else raw

    def pack(self, tile) -> int:
        tile = np.asarray(tile)
        if tile.shape != (self.rows, self.cols):
            raise ValueError(f"tile of shape {tile.shape} does not fit the physical tile [{self.rows}, {self.cols}]")
        value = 0
        for i, bits in enumerate(self._bits_of(tile).reshape(-1).tolist()):
            value |= int(bits) << (i * self.dtype.bits)
        return value

    def unpack(self, value: int) -> np.ndarray:
        w, mask = self.dtype.bits, (1 << self.dtype.bits) - 1
        raw = np.array([(value >> (i * w)) & mask for i in range(self.elements)], dtype=np.int64)
        if self.dtype.is_int:
            raw = np.where(raw >= 1 << (w - 1), raw - (1 << w), raw)
            return raw.astype(self.dtype.numpy).reshape(self.rows, self.cols)
        if self.dtype.name == "bf16":
            raw = raw << 16
        return raw.astype(np.uint32).view(np.float32).reshape(self.rows, self.cols)


class _Plain:
    """A payload that is the same on a stream as anywhere else (no ``short`` field)."""

    @property
    def token_width(self) -> int:
        return self.width

    def token_layout(self):
        return self.layout()

    def pack_token(self, value) -> int:
        return self.pack(value)

    def unpack_token(self, value: int):
        return self.unpack(value)


@dataclass(frozen=True)
class SelectorFormat(_Plain):
    n: int

    @property
    def width(self) -> int:
        return self.n

    def layout(self):
        return unsigned(self.n)

    def pack(self, mask) -> int:
        if not 0 <= int(mask) < 1 << self.n:
            raise ValueError(f"selector {mask:#x} does not fit {self.n} bits")
        return int(mask)

    def unpack(self, value: int) -> int:
        return int(value)


@dataclass(frozen=True)
class HandleFormat(_Plain):
    bits: int = 16

    @property
    def width(self) -> int:
        return self.bits

    def layout(self):
        return unsigned(self.bits)

    def pack(self, handle) -> int:
        return int(getattr(handle, "ident", handle)) & ((1 << self.bits) - 1)

    def unpack(self, value: int) -> int:
        return int(value)


@dataclass(frozen=True)
class TupleFormat(_Plain):
    """The items side by side, item 0 lowest, each as it is on a stream (a tile with its ``short``)."""

    items: tuple

    @property
    def width(self) -> int:
        return sum(i.token_width for i in self.items)

    def layout(self):
        return data.StructLayout({f"f{k}": item.token_layout() for k, item in enumerate(self.items)})

    def pack(self, values) -> int:
        out, shift = 0, 0
        for item, v in zip(self.items, values):
            out |= item.pack_token(v) << shift
            shift += item.token_width
        return out

    def unpack(self, value: int) -> tuple:
        out, shift = [], 0
        for item in self.items:
            out.append(item.unpack_token((value >> shift) & ((1 << item.token_width) - 1)))
            shift += item.token_width
        return tuple(out)


PayloadFormat = TileFormat | SelectorFormat | HandleFormat | TupleFormat


def payload_format(t: ElementType, handle_bits: int = 16) -> PayloadFormat:
    """Payload format of a language element type (tiles must have static sizes)."""
    if isinstance(t, Tile):
        if not (t.rows.is_Integer and t.cols.is_Integer):
            raise ParamError(f"a hardware tile needs a static size, got {t}")
        return TileFormat(t.dtype, int(t.rows), int(t.cols))
    if isinstance(t, Selector):
        return SelectorFormat(t.n)
    if isinstance(t, BufferRef):
        return HandleFormat(handle_bits)
    if isinstance(t, TupleType):
        return TupleFormat(tuple(payload_format(i, handle_bits) for i in t.items))
    raise ParamError(f"no hardware payload for element type {t!r}")


def has_short(view) -> bool:
    """Whether a tile payload view (an Amaranth view of :meth:`TileFormat.token_layout`) has a ``short``
    field: a tile of more than one row."""
    return isinstance(view.shape(), data.StructLayout)


def tile_elems(view):
    """The elements of a tile payload view: its ``elems`` field, or the payload itself for single rows."""
    return view.elems if has_short(view) else view


def token_short(view):
    """The ``short`` field of a tile payload view (missing rows), or 0 for single rows."""
    return view.short if has_short(view) else 0


def tile_format(dt, rows: int, cols: int) -> TileFormat:
    return TileFormat(make_dtype(dt), rows, cols)


@dataclass(frozen=True)
class TokenFormat:
    """The token layout for one stream: a payload format plus ``max_rank``."""

    payload: PayloadFormat
    max_rank: int = 3

    @property
    def stop_bits(self) -> int:
        return stop_bits(self.max_rank)

    @property
    def payload_width(self) -> int:
        """Bits of the payload field (a tile's elements and its ``short``)."""
        return self.payload.token_width

    @property
    def width(self) -> int:
        return self.payload_width + self.stop_bits + 1

    @property
    def done_bit(self) -> int:
        """Bit index of the done flag in a packed token."""
        return self.payload_width + self.stop_bits

    @property
    def layout(self) -> data.StructLayout:
        return data.StructLayout({"payload": self.payload.token_layout(), "stop": unsigned(self.stop_bits),
                                  "done": unsigned(1)})

    def pack(self, tok: Token) -> int:
        if tok.stop > self.max_rank:
            raise ValueError(f"stop S{tok.stop} exceeds max_rank {self.max_rank}")
        p = self.payload.pack_token(tok.payload) if tok.is_data else 0
        return p | (tok.stop << self.payload_width) | (int(tok.done) << self.done_bit)

    def unpack(self, value: int) -> Token:
        pw = self.payload_width
        done = (value >> self.done_bit) & 1
        if done:
            return DONE
        level = (value >> pw) & ((1 << self.stop_bits) - 1)
        if level:
            return stop_token(level)
        return data_token(self.payload.unpack_token(value & ((1 << pw) - 1)))

    def pack_all(self, tokens) -> list[int]:
        return [self.pack(t) for t in tokens]

    def unpack_all(self, values) -> list[Token]:
        return [self.unpack(v) for v in values]
