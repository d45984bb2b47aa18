"""cocotb test of a mapped fabric (top level + simulation-only DRAM model).

Self-contained (cocotb and the standard library only): ``step-hdl build`` copies
this file next to the Verilog as the standalone testbench, and
:mod:`step_hdl.sim.fabric` runs it under the cocotb runner.

The memory image is not in the job: the DRAM model's word array reads it from the hex
file the simulator's plusarg ``+step_image=PATH`` names as the simulation starts
(``sim.dram.ARRAY_VERILOG``). The job file (``$STEP_HDL_JOB``, default ``job.json``
beside this file) gives

* ``config``: top-level configuration writes (``addr | data << 24``);
* ``counters``: counter names, read back after the run through ``ctr_addr``;
* ``outputs``: ``{name: [first word, word count]}`` regions read back through
  ``peek_addr``; with ``expected`` (``{name: [hex words]}``) the test fails on
  the first differing word;
* ``max_cycles``: a bound on the run (the fabric's watchdog usually fires first);
* ``sample_every`` (a build with the counter sampler): the sampling interval, set
  before the run; the rows are read back through ``smp_addr`` afterwards.

The clock and the DRAM model run in the simulator; Python only
configures, waits for ``done`` or ``hung`` and reads back. Results go to
``$STEP_HDL_RESULT`` (JSON) when set; ``$STEP_HDL_PROGRESS`` names a file the
test writes the cycles run so far to, every :data:`CHUNK` cycles.
"""

import json
import os
import time
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, First, RisingEdge, Timer


#: cycles between two progress writes: a call into Python this rarely costs nothing measurable
CHUNK = 20_000
#: the clock period, in ns
PERIOD_NS = 10


def _job():
    path = os.environ.get("STEP_HDL_JOB") or str(Path(__file__).with_name("job.json"))
    with open(path) as f:
        return json.load(f)


async def _read(dut, addr_sig, data_sig, index):
    addr_sig.value = index
    await FallingEdge(dut.clk)
    return int(data_sig.value)


@cocotb.test()
async def run_fabric(dut):
    job = _job()
    # the clock toggles in the simulator's own loop (cocotb's C++ clock): cocotb's default, a Python task,
    # resumes Python at both edges of every cycle. All writes from here on are made at a falling edge, half
    # a period from the rising edge that samples them, so when the writes land in that time step does not
    # matter.
    clock = Clock(dut.clk, PERIOD_NS, unit="ns", impl="gpi")
    clock.start()
    dut.rst.value = 1
    dut.start.value = 0
    dut.cfg__valid.value = 0
    dut.load_en.value = 0
    dut.ctr_addr.value = 0
    dut.peek_addr.value = 0
    sampled = "sample_every" in job
    if sampled:
        dut.smp_every.value = int(job["sample_every"])
        dut.smp_addr.value = 0
    await ClockCycles(dut.clk, 2)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    dut.cfg__valid.value = 1
    for word in job["config"]:
        dut.cfg__payload.value = word
        await FallingEdge(dut.clk)
    dut.cfg__valid.value = 0
    dut.start.value = 1
    await FallingEdge(dut.clk)
    dut.start.value = 0
    # no Python per cycle from here: the simulator runs until done or hung (or the cycle bound); with
    # $STEP_HDL_PROGRESS, Python wakes every CHUNK cycles to write the cycles run so far there
    t_run = time.perf_counter()
    bound = int(job.get("max_cycles", 100_000_000))
    progress = os.environ.get("STEP_HDL_PROGRESS")
    ran = 0
    while ran < bound and not (int(dut.done.value) or int(dut.hung.value)):
        step = min(CHUNK, bound - ran) if progress else bound - ran
        # one timer, not ClockCycles: that one resumes Python at every rising edge to count them
        await First(RisingEdge(dut.done), RisingEdge(dut.hung), Timer(step * PERIOD_NS, unit="ns"))
        if int(dut.done.value) or int(dut.hung.value):
            break
        ran += step
        if progress:
            with open(progress, "w") as f:
                f.write(str(ran))
    run_s = time.perf_counter() - t_run
    await FallingEdge(dut.clk)
    status = "done" if int(dut.done.value) else ("hung" if int(dut.hung.value) else "timeout")
    counters = {}
    for k, name in enumerate(job["counters"]):
        counters[name] = await _read(dut, dut.ctr_addr, dut.ctr_data, k)
    outputs = {}
    for name, (first, count) in job["outputs"].items():
        outputs[name] = [format(await _read(dut, dut.peek_addr, dut.peek_data, first + k), "x")
                         for k in range(count)]
    samples = []
    if sampled:
        for k in range(int(dut.smp_count.value)):
            samples.append(format(await _read(dut, dut.smp_addr, dut.smp_data, k), "x"))
    result = {"status": status, "counters": counters, "outputs": outputs, "run_s": run_s, "samples": samples,
              "clock": clock.impl}
    out = os.environ.get("STEP_HDL_RESULT")
    if out:
        with open(out, "w") as f:
            json.dump(result, f)
    assert status == "done", f"the fabric did not finish: {status} (counters: {counters})"
    for name, want in job.get("expected", {}).items():
        got = outputs[name]
        for k, (g, w) in enumerate(zip(got, want)):
            assert int(g, 16) == int(w, 16), (f"output {name}: word {k} differs: got {g}, expected {w}")
    dut._log.info("fabric finished in %d cycles; outputs match: %s", counters.get("cycles", -1),
                  bool(job.get("expected")))
