"""The run report (``step_hdl.flow.report``, ``step-hdl report``, ``sim --report``): the harness's counter sampler,
the model's timeline, the page, its refusals, and the page in a real headless browser."""

import json
import re
import subprocess

import numpy as np
import pytest

from step_hdl.flow.cli import main
from step_hdl.errors import OutputError
from step_hdl.flow import DRAM_PRESETS, SimRun, model, prepare, run_rtl, sample_every
from step_hdl.flow.report import MARK, check_target, collect, intervals, render, write
from step_hdl.sim.fabric import RtlError
from step_hdl.workloads import swiglu
from tools import require

ARGS = ["swiglu", "--batch", "16", "--hidden", "8", "--inter", "64", "--tile-b", "8", "--tile-inter", "16"]


@pytest.fixture(scope="module")
def small():
    w = swiglu(16, 8, 64, 8, 16, "int16")
    return w, prepare(w, 4)


@pytest.fixture(scope="module")
def sampled(small):
    """The small SwiGLU on the Amaranth simulator, sampled every 25 cycles into 8 rows (fewer than the run
    needs: the sampler stops when its memory is full)."""
    w, prep = small
    return run_rtl(prep, "amaranth", samples=8, sample_every=25)


def test_sampler_rows_are_the_counters_every_interval(small, sampled):
    w, prep = small
    plain = run_rtl(prep, "amaranth")
    assert sampled.cycles == plain.cycles > 8 * 25        # sampling costs no cycle; the run outlasts the rows
    tl = sampled.timeline
    assert tl["every"] == 25 and tl["capacity"] == 8 and tl["names"] == prep.design.sample_names()
    rows = np.array(tl["rows"])
    assert rows.shape == (8, len(tl["names"]))
    assert list(rows[:, 0]) == [25 * k for k in range(1, 9)]          # each row holds its own cycle count
    assert tl["final"] == [plain.counters[n] for n in tl["names"]]
    assert (np.diff(rows, axis=0) >= 0).all() and (rows <= np.array(tl["final"])).all()
    edges, deltas = intervals(tl)
    assert list(edges) == [0, 25, 50, 75, 100, 125, 150, 175, 200, plain.cycles]
    for name in tl["names"]:
        assert deltas[name].sum() == plain.counters[name], name
    for u in prep.design.units:     # a unit is active or stalled at most every cycle of an interval
        assert (deltas[f"{u.name}.active"] + deltas[f"{u.name}.stalled"] <= np.diff(edges)).all()


@pytest.mark.slow      # about 55 s: three back-ends
def test_sampled_runs_agree_on_every_backend(small, sampled):
    """Verilator's sampled run: the same cycles and the same rows as the Amaranth simulator's."""
    w, prep = small
    res = run_rtl(prep, "verilator", samples=8, sample_every=25)
    assert res.cycles == sampled.cycles and res.timeline == sampled.timeline


def test_sampling_arguments_go_together(small):
    w, prep = small
    with pytest.raises(RtlError, match=r"samples \(8\) and sample_every \(0\) go together"):
        run_rtl(prep, "amaranth", samples=8)
    with pytest.raises(RtlError, match="sample_every must be an integer >= 0, got -1"):
        run_rtl(prep, "amaranth", samples=8, sample_every=-1)


def test_model_timeline_bins_each_nodes_busy_cycles(small):
    w, prep = small
    plain, timed = model(w, lowered=prep.lowered), model(w, lowered=prep.lowered, timeline=7)
    assert timed.cycles == plain.cycles and plain.timeline is None
    assert timed.timeline["every"] == 7
    for node, row in timed.timeline["busy"].items():
        assert sum(row) == plain.nodes[node]["busy"] and all(0 <= b <= 7 for b in row), node
    with pytest.raises(ValueError, match="timeline must be a bin width in cycles"):
        model(w, lowered=prep.lowered, timeline=-2)


def test_sample_interval_covers_the_expected_run():
    assert sample_every(1000, 200) == 7 and sample_every(10, 200) == 1 and sample_every(0) == 1


def test_page_has_every_section_and_refuses_to_replace_a_users_file(small, sampled, tmp_path):
    w, prep = small
    data = collect(SimRun(w, prep, sampled, DRAM_PRESETS["paper"]), title="swiglu small", params={"batch": 16})
    assert data.model["timeline"]["every"] == 25       # the model's bins are the harness's
    page = render(data)
    assert page.startswith(MARK + "\n<!DOCTYPE html>")
    for text in ("<h1>swiglu small</h1>", "match the interpreter bit for bit", "<h2>The fabric</h2>",
                 '<div id="timeline"><svg', "<h2>Model timeline</h2>", "<h2>Off-chip bandwidth</h2>",
                 "compute-bound", "<h2>FPGA estimate</h2>", "the harness's 8 samples ended before the run did"):
        assert text in page, text
    # self-contained: no script, no resource fetched from anywhere (SVG namespaces are names, not fetches)
    assert "<script" not in page and not re.search(r'(src|href)="(https?:|//)', page)
    out = tmp_path / "run.html"
    write(out, page)
    write(out, page)                   # a report replaces a report
    user = tmp_path / "notes.html"
    user.write_text("<html>mine</html>")
    with pytest.raises(OutputError, match=r"--report .*notes.html: the file exists and is not a step-hdl report; "
                                          r"choose another name, or --force to replace it"):
        write(user, page)
    assert user.read_text() == "<html>mine</html>"
    write(user, page, force=True)
    assert user.read_text() == page
    with pytest.raises(OutputError, match="is a folder; expected a file name"):
        check_target(tmp_path)
    with pytest.raises(OutputError, match=r"-o .*: the folder .*missing does not exist"):
        check_target(tmp_path / "missing" / "r.html", option="-o")


def _chromium(args, url):
    exe = require("chromium")
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--enable-logging=stderr",
           "--v=0", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _console(path):
    r = _chromium(["--dump-dom"], f"file://{path}")
    return [line for line in r.stderr.splitlines() if ":CONSOLE" in line], r.stdout


def _dark_green(png) -> int:
    """Pixels in the darkest greens of the active-fraction heatmap (the fabric's boxes are lighter)."""
    import matplotlib.image as mpimg
    img = (mpimg.imread(png)[..., :3] * 255).astype(int)
    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    return int(((r < 40) & (g > 50) & (g < 115) & (b < 70)).sum())


def test_page_loads_in_chromium_without_console_errors_and_shows_the_timeline(small, sampled, tmp_path):
    w, prep = small
    page = render(collect(SimRun(w, prep, sampled, DRAM_PRESETS["paper"]), title="swiglu small"))
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><script>missing_function();</script></body></html>')
    errors, _ = _console(bad)
    assert any("Uncaught ReferenceError" in e for e in errors)          # the check sees an error when there is one
    good = tmp_path / "report.html"
    write(good, page)
    errors, dom = _console(good)
    assert errors == [] and "RTL: active fraction per unit" in dom
    shots = {}
    for name, text in (("report", page), ("without_timeline", page.replace(
            page[page.index('<div id="timeline">'):page.index("</div>", page.index('<div id="timeline">'))], ""))):
        src = tmp_path / f"{name}.html"
        src.write_text(text)
        png = tmp_path / f"{name}.png"
        _chromium(["--window-size=1200,4000", f"--screenshot={png}"], f"file://{src}")
        shots[name] = _dark_green(png)
    assert shots["report"] > 2000 and shots["without_timeline"] < shots["report"] / 4, shots


def test_report_command_writes_the_page_and_sim_report_adds_it(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", *ARGS, "--backend", "amaranth", "--samples", "20", "-o", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["report"] == str(out) and rep["outputs_match"] and out.read_text().startswith(MARK)
    assert f"every {-(-rep['model_cycles'] * 5 // 80)} cycles" in out.read_text()      # ceil(1.25 m / 20)
    user = tmp_path / "mine.html"
    user.write_text("keep")
    assert main(["sim", *ARGS, "--backend", "amaranth", "--report", str(user)]) == 2
    err = capsys.readouterr().err
    assert f"--report {user}: the file exists and is not a step-hdl report" in err and user.read_text() == "keep"
