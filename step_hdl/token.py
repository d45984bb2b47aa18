"""The token model shared by the interpreter, the RTL testbenches and the models.

A token has three fields, the same three the hardware token layout carries:

* ``stop``: 0 for a data token, ``k`` for the stop token ``S_k``;
* ``done``: true only for the single token that ends a stream;
* ``payload``: the data (a numpy tile, a selector bit mask, a buffer handle, a
  tuple of those), ``None`` for stop and done tokens.

Encoding (spec section 1): data come in row-major order; ``S_k`` closes a run of
dimension ``D_(k-1)``; where several dimensions end at once only the highest
stop is sent; every stream ends with one done token.

One convention the spec leaves open: a stop ``S_k`` closes the current element
of every level below ``k``, even an empty one. An empty dimension ``D_0``
therefore round-trips exactly, and an empty dimension ``D_j`` with ``j >= 1``
decodes as one element holding an empty vector (both produce the same tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np


@dataclass(frozen=True, slots=True, eq=False)
class Token:
    """One stream token: data (``stop == 0``), stop ``S_k`` (``stop == k``) or done."""

    stop: int = 0
    done: bool = False
    payload: Any = None

    @property
    def is_data(self) -> bool:
        return self.stop == 0 and not self.done

    def __eq__(self, other) -> bool:
        if not isinstance(other, Token):
            return NotImplemented
        return self.stop == other.stop and self.done == other.done and payload_equal(self.payload, other.payload)

    __hash__ = None

    def __repr__(self) -> str:
        if self.done:
            return "D"
        if self.stop:
            return f"S{self.stop}"
        return f"<{payload_repr(self.payload)}>"


DONE = Token(done=True)


def data(payload) -> Token:
    """A data token."""
    return Token(0, False, payload)


def stop(k: int) -> Token:
    """The stop token ``S_k``."""
    return Token(k, False, None)


def payload_equal(a, b) -> bool:
    """Exact equality of two payloads (tiles compared element-wise, shape and dtype too; float tiles bit for
    bit, so a NaN equals the same NaN and -0 differs from +0)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape
                and a.dtype == b.dtype):
            return False
        if a.dtype.kind == "f":
            view = np.dtype(f"u{a.dtype.itemsize}")
            return bool(np.array_equal(a.view(view), b.view(view)))
        return bool(np.array_equal(a, b))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(payload_equal(x, y) for x, y in zip(a, b))
    return a == b


def payload_repr(p) -> str:
    if isinstance(p, np.ndarray):
        if p.size == 1:
            return str(p.reshape(-1)[0])
        return f"{p.dtype}{list(p.shape)}"
    if isinstance(p, tuple):
        return "(" + ", ".join(payload_repr(x) for x in p) + ")"
    return repr(p)


def encode(nested, rank: int) -> list[Token]:
    """Tokens (ending with done) of a rank-``rank`` stream given as nested lists.

    ``nested`` has ``rank + 1`` levels of lists; its leaves are payloads.
    """
    out = _encode_level(nested, rank)
    out.append(DONE)
    return out


def _encode_level(items, k: int) -> list[Token]:
    if k == 0:
        return [data(x) for x in items]
    out: list[Token] = []
    for item in items:
        sub = _encode_level(item, k - 1)
        if sub and sub[-1].stop:
            sub[-1] = stop(k)  # several dimensions end at once: only the highest stop
        else:
            sub.append(stop(k))
        out.extend(sub)
    return out


def decode(tokens: Sequence[Token], rank: int):
    """Inverse of :func:`encode`: nested lists (``rank + 1`` levels) of payloads.

    Raises ``ValueError`` when the tokens are not a well-formed rank-``rank``
    stream (stop level above the rank, data after done, missing done).
    """
    levels: list[list] = [[] for _ in range(rank + 1)]
    seen_done = False
    for i, t in enumerate(tokens):
        if seen_done:
            raise ValueError(f"token {i} ({t!r}) comes after done")
        if t.done:
            seen_done = True
        elif t.stop == 0:
            levels[0].append(t.payload)
        else:
            if t.stop > rank:
                raise ValueError(f"token {i} is S{t.stop} but the stream has rank {rank}")
            for j in range(t.stop):
                levels[j + 1].append(levels[j])
                levels[j] = []
    if not seen_done:
        raise ValueError("stream has no done token")
    for j in range(rank):
        if levels[j]:
            raise ValueError(f"stream ends with an open dimension D{j} (missing stop S{j + 1})")
    return levels[rank]


def nested_shape(nested, rank: int) -> list:
    """Observed sizes per level: ``[D_r, [D_(r-1) per outer index], ...]`` flattened per level.

    Returns a list of ``rank + 1`` lists; list ``i`` (outermost first) holds the
    length of every list at that level, in order.
    """
    out: list[list[int]] = [[] for _ in range(rank + 1)]
    frontier = [nested]
    for level in range(rank + 1):
        out[level] = [len(x) for x in frontier]
        if level < rank:
            frontier = [y for x in frontier for y in x]
    return out


def leaves(nested, rank: int) -> list:
    """All payloads of a nested stream value in row-major order."""
    frontier = [nested]
    for _ in range(rank + 1):
        frontier = [y for x in frontier for y in x]
    return frontier


def format_tokens(tokens: Iterable[Token], limit: int = 40) -> str:
    """Short text of a token sequence, like the spec's ``a b c S1 D``."""
    tokens = list(tokens)
    text = " ".join(repr(t) for t in tokens[:limit])
    if len(tokens) > limit:
        text += f" ... (+{len(tokens) - limit})"
    return text
