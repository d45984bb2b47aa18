"""The token layout (units/layout.py): tiles carry their valid rows on a stream, memory words do not."""

import numpy as np
import pytest

from step_hdl.sim.rtl import run_scenario
from step_hdl.sim.streams import Scenario
from step_hdl.token import DONE, data, stop
from step_hdl.units.layout import TokenFormat, tile_format
from step_hdl.units.stream import Queue

FMT = TokenFormat(tile_format("int16", 4, 4), 3)


def _tile(rows, seed=0):
    return np.random.default_rng(seed).integers(-300, 300, (rows, 4)).astype(np.int16)


def test_a_partial_tile_keeps_its_valid_rows():
    for rows in (1, 2, 3, 4):
        tok = data(_tile(rows, rows))
        value = FMT.pack(tok)
        assert value >> FMT.payload.width & 0b11 == 4 - rows          # short: the missing rows
        assert FMT.unpack(value) == tok


def test_short_field_widths():
    assert [tile_format("int8", r, r).short_bits for r in (1, 2, 4, 16)] == [0, 1, 2, 4]
    assert tile_format("int8", 1, 4).token_layout() == tile_format("int8", 1, 4).layout()   # rows: no field
    assert FMT.payload_width == 4 * 4 * 16 + 2 and FMT.done_bit == FMT.payload_width + FMT.stop_bits


def test_memory_words_hold_the_elements_only():
    t = tile_format("int16", 4, 4)
    full = _tile(4)
    assert t.pack(full) == FMT.pack(data(full)) and t.pack(full) < 1 << t.width


@pytest.mark.parametrize("shape", [(0, 4), (5, 4), (2, 3), (4,)])
def test_a_tile_that_does_not_fit_is_refused(shape):
    with pytest.raises(ValueError, match=r"does not fit the physical tile \[4, 4\] \(1 to 4 rows of 4\)"):
        FMT.pack(data(np.zeros(shape, np.int16)))


def test_a_payload_with_no_valid_row_is_refused():
    with pytest.raises(ValueError, match=r"short 5 leaves no valid row of a \[4, 4\] tile"):
        tile_format("int16", 4, 4).unpack_token(5 << 256)
    # (a 2-bit field cannot say 4 or more on 4x4: the check guards wider fields and hand-made words)


@pytest.mark.parametrize("seed", (1, 2))
def test_partial_tiles_cross_a_fifo_with_their_counts(sim_backend, seed):
    toks = [data(_tile(1 + (k + seed) % 4, k)) for k in range(12)] + [stop(1), data(_tile(2, 99)), stop(2), DONE]
    out, _ = run_scenario(Queue(FMT.layout, 2), Scenario({"i": FMT.pack_all(toks)}, {"o": FMT.done_bit},
                                                        seed=seed), sim_backend, "layout_fifo")
    assert FMT.unpack_all(out["o"]) == toks
