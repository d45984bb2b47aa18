"""Shared fixtures: access to the real traces in ../shared/traces (skipped when absent), the RTL back-end of the
unit tests (``--sim``), and the ``needs(tool)`` marker: a test that needs a system tool skips, naming its install
step, where it is absent (``tests/tools.py``)."""

from __future__ import annotations

import pytest

from step_hdl.workloads.traces import TraceNotFound, kv_traces, routing_trace

from helpers import REDUCED, SWEEP
from tools import require, require_backend


@pytest.fixture(scope="session")
def routing():
    """``routing(name)`` -> the routing table of a trace, or skip when the traces are absent."""
    def get(name):
        try:
            return routing_trace(name)
        except TraceNotFound as exc:
            pytest.skip(f"routing trace unavailable: {exc}")
    return get


@pytest.fixture(scope="session")
def kv_files():
    """``kv_files(batch)`` -> the KV trace files of a batch size, or skip when absent."""
    def get(batch):
        try:
            return kv_traces(batch)
        except TraceNotFound as exc:
            pytest.skip(f"KV traces unavailable: {exc}")
    return get


@pytest.fixture(scope="session")
def reduced_sweep():
    """``(fabric, workloads, prepared)`` of the reduced SwiGLU sweep on one shared 4x4 fabric: one design, so
    one Verilator build serves every test that runs it (the sweep, the back-end check, the testbench)."""
    from step_hdl.flow import prepare, shared_fabric
    from step_hdl.workloads import swiglu
    ws = [swiglu(REDUCED["batch"], REDUCED["hidden"], REDUCED["inter"], tb, ti, "int16") for tb, ti in SWEEP]
    fab = shared_fabric(ws, 4)
    return fab, ws, [prepare(w, fab) for w in ws]


def pytest_addoption(parser):
    parser.addoption("--sim", default="amaranth", choices=("amaranth", "verilator", "icarus"),
                     help="simulation back-end for hardware unit tests (default: amaranth)")


@pytest.fixture(scope="session")
def sim_backend(request):
    """The back-end chosen with --sim (a skip naming the install step when its tool is absent)."""
    return require_backend(request.config.getoption("--sim"))


def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs"):
        for tool in mark.args:
            require(tool)
