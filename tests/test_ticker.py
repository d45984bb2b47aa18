"""The terminal status line of long steps (``sim.ticker``) and what the RTL flow shows in it."""

import io
import time

from step_hdl.sim.rtl import _build_stage, _cycles_so_far
from step_hdl.ticker import Ticker


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_ticker_rewrites_one_line_and_clears_it():
    out = Terminal()
    calls = []
    with Ticker(lambda: calls.append(1) or f"{len(calls)} done", "  building", delay=0, every=0.01, stream=out):
        time.sleep(0.1)
    text = out.getvalue()
    assert text.startswith("\r\x1b[2K  building: 1 done (0 s)") and "\n" not in text
    assert text.endswith("\r\x1b[2K") and len(calls) >= 2


def test_ticker_is_silent_off_a_terminal_and_when_disabled():
    for stream, enabled in ((io.StringIO(), True), (Terminal(), False)):
        with Ticker(lambda: "x", "label", enabled, delay=0, every=0.01, stream=stream):
            time.sleep(0.05)
        assert stream.getvalue() == ""


def test_a_status_that_fails_shows_the_time_alone():
    out = Terminal()
    with Ticker(lambda: 1 / 0, "run", delay=0, every=0.01, stream=out):
        time.sleep(0.05)
    assert "run: (0 s)" in out.getvalue()


def test_build_stage_and_cycles_read_from_files(tmp_path):
    start = time.time() - 1
    assert _build_stage(tmp_path, start) == "translating the Verilog to C++"
    for name in ("Vtop.cpp", "Vtop__1.cpp", "Vtop.o"):
        (tmp_path / name).write_text("")
    assert _build_stage(tmp_path, start) == "compiling C++, 1 of 2 files"
    assert _cycles_so_far(tmp_path / "progress") == "loading the memory image"
    (tmp_path / "progress").write_text("120000")
    assert _cycles_so_far(tmp_path / "progress") == "120,000 cycles"
