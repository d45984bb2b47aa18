"""Static bounds on the dynamic counts that routing creates.

A Partition's output ``i`` has a new dynamic outer dimension ``n_i``: how many
chunks it received (spec section 2). The counts of one Partition are not
independent: each input chunk goes to the outputs its selector chooses, so

    n_0 + n_1 + ... + n_(n-1)  <=  chunks(in) · k

where ``k`` is the most outputs one selector token chooses: a SelectorSource's
declared ``k`` (an MoE's top-k), 1 for the selector an EagerMerge emits, ``n``
otherwise. This module finds those bounds; on-chip memory shared by the
buffers of dynamically sized tiles (:mod:`step_hdl.mapper.pools`) is sized by
them instead of by each buffer's largest possible tile, and
:func:`step_hdl.metrics.metrics` reports them.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from .types import Selector


@dataclass(frozen=True)
class CountGroup:
    """The dynamic counts of one Partition's outputs and the static bound on their sum.

    Attributes
    ----------
    partition : str
        The Partition node.
    symbols : tuple of str
        Its outputs' count symbols, ``n_0`` first.
    chunks : int
        Chunks of its input (one per selector token).
    choices : int
        The most outputs one selector token chooses.
    """

    partition: str
    symbols: tuple
    chunks: int
    choices: int

    @property
    def total(self) -> int:
        """The static bound on the sum of the counts: ``chunks · choices``."""
        return self.chunks * self.choices

    def blocks(self, rows_per_block: int, members: int | None = None) -> int:
        """The most blocks of ``rows_per_block`` rows the counts fill when each output's chunks are cut into
        blocks separately (``sum_i ceil(n_i / q)``), over ``members`` of the outputs (default: all).

        An output with ``n > 0`` chunks takes ``1 + floor((n - 1) / q)`` blocks, so the sum is largest when
        as many outputs as can have one chunk each and the rest go in whole blocks:
        ``m + floor((total - m) / q)`` with ``m = min(members, total)``.
        """
        q = rows_per_block
        m = min(len(self.symbols) if members is None else members, self.total)
        return m + (self.total - m) // q


def selector_choices(ref) -> int:
    """The most outputs one token of selector stream ``ref`` chooses (its producer's declaration)."""
    node = ref.node
    while node.kind == "Broadcast":
        node = node.inputs["in"].node
    t = ref.type.dtype
    n = t.n if isinstance(t, Selector) else 1
    if node.kind == "SelectorSource":
        if node.p("values") is not None:
            return max([bin(_mask(row)).count("1") for row in node.p("values")] or [0])
        return node.p("k") if node.p("k") is not None else n
    if node.kind == "EagerMerge":
        return 1            # its selector names the one input each chunk came from
    return n


def _mask(row) -> int:
    import numpy as np
    mask = 0
    for c in np.atleast_1d(np.asarray(row, dtype=object)).tolist():
        if int(c) >= 0:
            mask |= 1 << int(c)
    return mask


def count_groups(graph) -> dict[str, CountGroup]:
    """``{count symbol name: its group}`` for every Partition of ``graph`` whose input has a static number of
    chunks (a dynamic one gives no static bound)."""
    out = {}
    for node in graph.nodes.values():
        if node.kind != "Partition":
            continue
        st, rank = node.t("in"), node.p("rank")
        outer = sympy.Mul(*st.shape[:len(st.shape) - rank]) if len(st.shape) > rank else sympy.Integer(1)
        if not sympy.sympify(outer).is_Integer:
            continue
        symbols = []
        for i in range(node.p("n")):
            d = sympy.sympify(node.out_types[f"out{i}"].shape[0])
            symbols.append(d.name if d.is_Symbol else None)
        if None in symbols:
            continue
        g = CountGroup(node.name, tuple(symbols), int(outer), selector_choices(node.inputs["sel"]))
        for s in symbols:
            out[s] = g
    return out
