"""The package's layers come from its folders and import in one direction (language <- units <- mapper <- model
<- sim/fpga <- flow), no modules import one another in a cycle, no module uses another's private names, and the
Verilog cache key covers every module the generator reads."""

import tomllib

import pytest

from step_hdl import sources


def test_no_import_points_up_a_layer():
    assert sources.upward_imports() == []


def test_no_import_cycles():
    """Function-level imports included: a cycle closed inside a function is a cycle all the same."""
    assert sources.import_cycles() == []


def test_no_private_name_crosses_a_module():
    assert sources.private_imports() == []


def test_every_import_names_a_module():
    """A lazy import inside a function (``from .token import ...`` in a module that moved) fails only when its
    function runs: every one must resolve."""
    assert sources.unresolved_imports() == []


def test_a_modules_folder_gives_its_layer():
    layers = {m: sources.layer_of(m) for m in sources.package_modules()}
    assert layers["step_hdl.flow"] == layers["step_hdl.flow.cli"] == layers["step_hdl.flow.sweep.run"] == "flow"
    assert layers["step_hdl.units.memport"] == "units" and layers["step_hdl.mapper.top"] == "mapper"
    assert layers["step_hdl.sim.model.core"] == layers["step_hdl.sim.model"] == "model"
    assert layers["step_hdl.sim.fabric"] == "sim" and layers["step_hdl.fpga.ecp5"] == "fpga"
    assert layers["step_hdl.functions"] == layers["step_hdl.workloads.moe"] == "language"
    assert set(layers.values()) == set(sources.LAYERS)


def test_every_package_is_installed():
    """A folder of modules missing from pyproject.toml's package list works in the checkout but not installed."""
    with open(sources.repository() / "pyproject.toml", "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    packages = {m for m in sources.package_modules() if sources.source_file(m).name == "__init__.py"}
    assert packages == listed


def test_amaranth_must_use_is_silenced_in_one_place():
    """Amaranth's private ``_MustUse__silence`` is set by ``units.base.not_elaborated`` alone."""
    users = [m for m in sources.package_modules() if "_MustUse__silence" in sources.source_file(m).read_text()]
    assert users == ["step_hdl.units.base"]


def test_checks_can_fail(tmp_path, monkeypatch):
    """The checkers themselves can fail: a units module that imports the mapper (even lazily, inside a function),
    a sim module that imports the FPGA flow, two modules importing each other and a private name used across
    modules are all reported."""
    fake = {"step_hdl.units.fake": "def f():\n    from step_hdl.mapper.top import plan\n",
            "step_hdl.sim.fake": "from ..fpga import ecp5\nfrom step_hdl.sim import fake2\n",
            "step_hdl.sim.fake2": "def g():\n    from step_hdl.sim.fake import _secret\n"}
    folders = {"step_hdl.units.fake": "units", "step_hdl.sim.fake": "sim", "step_hdl.sim.fake2": "sim"}
    paths = {}
    for name, text in fake.items():
        paths[name] = tmp_path / (name.replace(".", "_") + ".py")
        paths[name].write_text(text)
    real, real_folder = sources.source_file.__wrapped__, sources.folder_of
    monkeypatch.setattr(sources, "source_file", lambda m: paths.get(m) or real(m))
    monkeypatch.setattr(sources, "folder_of", lambda m: folders.get(m) or real_folder(m))
    monkeypatch.setattr(sources, "imports_of", sources.imports_of.__wrapped__)
    monkeypatch.setattr(sources, "package_modules", lambda: sorted(fake))
    assert sources.upward_imports() == ["step_hdl.sim.fake (sim) -> step_hdl.fpga (fpga)",
                                        "step_hdl.sim.fake (sim) -> step_hdl.fpga.ecp5 (fpga)",
                                        "step_hdl.units.fake (units) -> step_hdl.mapper.top (mapper)"]
    assert sources.import_cycles() == [["step_hdl.sim.fake", "step_hdl.sim.fake2"]]
    assert sources.private_imports() == ["step_hdl.sim.fake2 -> step_hdl.sim.fake._secret"]


@pytest.mark.parametrize("module", ["step_hdl.functions", "step_hdl.units.compute", "step_hdl.units.memport",
                                    "step_hdl.mapper.fabric", "step_hdl.sim.model.dram"])
def test_verilog_cache_key_covers_what_the_generator_reads(module):
    """The bit-exact constants (exp ROMs in step_hdl.functions) and every unit module are in the key."""
    from step_hdl.sim.fabric import GENERATOR_MODULES
    assert module in sources.closure(GENERATOR_MODULES)
