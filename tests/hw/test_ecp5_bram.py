"""The ECP5 flow's block RAMs with their output registers (``fpga.ecp5_bram``): an on-chip buffer elaborated
for them gives the tokens it gives without them, in the same cycles (simulated with the block's behavioural
model), in each of the block's modes."""

import random

import numpy as np
import pytest
from amaranth.back import rtlil

from step_hdl.fpga.ecp5_bram import MODEL_VERILOG
from step_hdl.fpga.ecp5_dsp import Ecp5Dsp
from step_hdl.sim.rtl import run_scenario
from step_hdl.sim.streams import Scenario
from step_hdl.units.onchip import OnChipBuffer, OnChipBufferParams

from hw.test_memory_units import L, _nested, buffer_reference, dyn, encode, tile_tokens, tiles

#: the ECP5 primitives' simulation models run on Icarus
pytestmark = pytest.mark.needs("iverilog")


def buffer(sram_bytes, out_reg=True):
    return OnChipBuffer(OnChipBufferParams(rows=2, cols=2, dtype="int16", max_rank=3, sram_bytes=sram_bytes,
                                           out_reg=out_reg))


def blocks(unit) -> int:
    return rtlil.convert(unit, platform=Ecp5Dsp()).count("DP16KD")


# sram_bytes -> the words of the memory (both banks of 8-byte tiles) and the block mode they take
@pytest.mark.parametrize("sram_bytes, mode", [(256, 36), (8192, 18), (16384, 9)])
@pytest.mark.parametrize("k", range(2))
def test_buffer_on_registered_brams(sram_bytes, mode, k):
    """Random buffers, repeats and ranks through a buffer whose SRAM data is in the blocks' output registers,
    with random stalls on both sides: the tokens and the cycles of the buffer's own memory and register."""
    rng, nprng = random.Random(7000 + k), np.random.default_rng(k)
    r = 1 + k % 2
    b = 1 + (k // 2) % r
    repeat = rng.choice([None, 2])
    nested = _nested(rng, r + 1, outer=rng.randint(1, 4),
                     leaf=lambda: nprng.integers(-500, 500, (2, 2)).astype(np.int16))
    st = tiles(2, 2, *([dyn("N")] + [L] * r), dt="int16")
    tokens = encode(nested, r)
    want = buffer_reference(st, tokens, b, repeat)
    for seed in (0, 1):
        runs = []
        for platform in (None, Ecp5Dsp()):
            unit = buffer(sram_bytes)
            fmt = unit.fmt("o")
            config = unit.configure({"rank": b, "repeat": repeat}, {"in": st})
            sc = Scenario({"i": fmt.pack_all(tokens)}, {"o": fmt.done_bit}, config, seed=seed)
            got, cycles = run_scenario(unit, sc, "icarus", f"bram_{mode}_{k}_{platform is not None}",
                                       platform=platform, models=MODEL_VERILOG if platform else "")
            runs.append((fmt.unpack_all(got["o"]), cycles))
        assert runs[0][0] == want, f"seed {seed}: the buffer's own memory"
        assert runs[1] == runs[0], f"seed {seed}: on the blocks ({mode}-bit words) against its own memory"


def test_blocks_only_for_a_registered_buffer_that_fits_them():
    """Blocks side by side for the word (66 bits: a 2x2 int16 tile and its stop level): two of 36 bits, four
    of 18, eight of 9; none without ``out_reg`` or deeper than 2,048 words (Yosys maps those)."""
    assert [blocks(buffer(n)) for n in (256, 8192, 16384)] == [2, 4, 8]
    assert blocks(buffer(256, out_reg=False)) == 0
    assert blocks(buffer(32768)) == 0


@pytest.mark.parametrize("p_gap", [0.0, 0.3])
def test_streaming_reading_on_registered_brams(p_gap):
    """An affine reading of the chunk being written, each entry read right behind its write (the case where
    a read comes nearest the word being written): the same tokens and cycles on the blocks."""
    st = tiles(2, 2, 1, 8, dt="int16")
    tokens = tile_tokens("1 2 3 4 5 6 7 8 S1 D")
    read = ([2, 4], [4, 1])
    want = buffer_reference(st, tokens, 1, None, None, read, None)
    runs = []
    for platform in (None, Ecp5Dsp()):
        unit = OnChipBuffer(OnChipBufferParams(rows=2, cols=2, dtype="int16", max_rank=3, sram_bytes=256,
                                               read_dims=2, out_reg=True))
        config = unit.configure({"rank": 1, "repeat": None, "read_shape": read[0], "read_stride": read[1],
                                 "merge": None}, {"in": st})
        fmt = unit.fmt("o")
        sc = Scenario({"i": fmt.pack_all(tokens)}, {"o": fmt.done_bit}, config, seed=3, p_gap=p_gap,
                      p_drop=p_gap)
        got, cycles = run_scenario(unit, sc, "icarus", f"bram_stream_{platform is not None}", platform=platform,
                                   models=MODEL_VERILOG if platform else "")
        runs.append((fmt.unpack_all(got["o"]), cycles))
    assert runs[0][0] == want and runs[1] == runs[0]
