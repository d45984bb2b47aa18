"""The package's layers import in one direction (language <- units <- mapper <- sim/fpga <- flow/cli), and the
Verilog cache key covers every module the generator reads."""

import pytest

from step_hdl import sources


def test_no_import_points_up_a_layer():
    assert sources.upward_imports() == []


def test_every_import_names_a_module():
    """A lazy import inside a function (``from .token import ...`` in a module that moved) fails only when its
    function runs: every one must resolve."""
    assert sources.unresolved_imports() == []


def test_every_module_has_a_layer():
    layers = {m: sources.layer_of(m) for m in sources.package_modules()}
    assert layers["step_hdl.flow"] == layers["step_hdl.cli"] == layers["step_hdl.sweep.run"] == "top"
    assert layers["step_hdl.report"] == "top"
    assert layers["step_hdl.units.memport"] == "units" and layers["step_hdl.mapper.top"] == "mapper"
    assert layers["step_hdl.sim.model"] == "sim" and layers["step_hdl.fpga.ecp5"] == "fpga"
    assert layers["step_hdl.functions"] == layers["step_hdl.workloads.moe"] == "language"


def test_an_upward_import_is_found(tmp_path, monkeypatch):
    """The checker itself can fail: a units module that imports the mapper (even lazily, inside a function)
    and a sim module that imports the FPGA flow are both reported."""
    fake = {"step_hdl.units.fake": "def f():\n    from step_hdl.mapper.top import plan\n",
            "step_hdl.sim.fake": "from ..fpga import ecp5\n"}
    paths = {}
    for name, text in fake.items():
        paths[name] = tmp_path / (name.replace(".", "_") + ".py")
        paths[name].write_text(text)
    real = sources.source_file.__wrapped__
    monkeypatch.setattr(sources, "source_file", lambda m: paths.get(m) or real(m))
    monkeypatch.setattr(sources, "imports_of", sources.imports_of.__wrapped__)
    monkeypatch.setattr(sources, "package_modules", lambda: sorted(fake))
    assert sources.upward_imports() == ["step_hdl.sim.fake (sim) -> step_hdl.fpga (fpga)",
                                        "step_hdl.sim.fake (sim) -> step_hdl.fpga.ecp5 (fpga)",
                                        "step_hdl.units.fake (units) -> step_hdl.mapper.top (mapper)"]


@pytest.mark.parametrize("module", ["step_hdl.functions", "step_hdl.units.compute", "step_hdl.units.memport",
                                    "step_hdl.mapper.fabric", "step_hdl.sim.dram_timing"])
def test_verilog_cache_key_covers_what_the_generator_reads(module):
    """The bit-exact constants (exp ROMs in step_hdl.functions) and every unit module are in the key."""
    from step_hdl.sim.fabric import GENERATOR_MODULES
    assert module in sources.closure(GENERATOR_MODULES)
