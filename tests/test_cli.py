"""The step-hdl command line (run in-process and once as a real subprocess)."""

import json
import re
import subprocess
import sys

import pytest

from step_hdl.flow.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_metrics_swiglu_json(capsys):
    code, out, _ = run_cli(capsys, "metrics", "swiglu", "--batch", "64", "--hidden", "256", "--inter", "512",
                           "--tile-b", "16", "--tile-inter", "16", "--dtype", "fp32", "--json")
    assert code == 0
    rep = json.loads(out)
    assert rep["offchip_bytes"] == 4 * (64 * 256 * 512 // 16 + 3 * 4 * 256 * 512 + 64 * 256)
    assert isinstance(rep["onchip_bytes"], int) and isinstance(rep["flops"], int)
    assert rep["flops"] == 3 * 2 * 64 * 256 * 512 + 9 * 64 * 512 + 64 * 256 * 32


def test_metrics_dynamic_workload_observes_sizes(capsys, routing):
    routing("mixtral_b64")
    code, out, _ = run_cli(capsys, "metrics", "gqa", "--json")
    assert code == 0
    rep = json.loads(out)
    assert rep["observed_in_run"] and isinstance(rep["offchip_bytes"], int)


def test_run_and_draw(capsys, tmp_path, routing):
    routing("mixtral_b64")
    code, out, _ = run_cli(capsys, "run", "moe", "--tiling", "static", "--tile", "8", "--json")
    rep = json.loads(out)
    assert code == 0 and rep["outputs_match"] and rep["offchip_bytes"] == rep["offchip_bytes_symbolic"]
    dot = tmp_path / "g.dot"
    code, out, _ = run_cli(capsys, "draw", "swiglu", "-o", str(dot))
    assert code == 0 and dot.read_text().startswith("digraph")
    js = tmp_path / "g.json"
    assert run_cli(capsys, "export", "swiglu", "-o", str(js))[0] == 0
    assert json.loads(js.read_text())["name"] == "swiglu"


def test_bad_parameters_give_a_clear_error(capsys):
    code, out, err = run_cli(capsys, "metrics", "swiglu", "--tile-b", "7")
    assert code == 2
    assert "StepShapeError: LinearOffChipLoad 'load_x': tile rows 7 does not divide tensor 'x' rows 64" in err
    assert "Traceback" not in err


def test_console_script_installed():
    out = subprocess.run([sys.executable, "-m", "step_hdl.flow.cli", "metrics", "swiglu", "--json"],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["offchip_bytes"] > 0


def test_model_command(capsys, routing):
    routing("mixtral_b64")
    code, out, _ = run_cli(capsys, "model", "swiglu", "--batch", "16", "--hidden", "64", "--inter", "128", "--json")
    rep = json.loads(out)
    assert code == 0 and rep["cycles"] > rep["offchip_bytes"] / 256 and rep["phys_tile"] == 4
    assert rep["params"]["dtype"] == "int16"
    assert rep["bound"]["dram"] == -(-rep["offchip_bytes"] // 256) and rep["bound"]["cycles"] <= rep["cycles"]
    code, out, _ = run_cli(capsys, "model", "moe", "--tiling", "static", "--tile", "8", "--dtype", "int16",
                           "--phys-tile", "4", "--values", "--json")
    rep = json.loads(out)
    assert code == 0 and rep["outputs_match"]


def test_sim_json_on_amaranth(capsys):
    code, out, _ = run_cli(capsys, "sim", "swiglu", "--batch", "16", "--hidden", "8", "--inter", "64", "--tile-b", "8",
                           "--tile-inter", "16", "--backend", "amaranth", "--json")
    rep = json.loads(out)
    assert code == 0 and rep["outputs_match"] and rep["status"] == "done"
    assert rep["offchip_bytes"] == rep["reference_offchip_bytes"] == 2 * (16 * 8 * 64 // 16 + 3 * 2 * 8 * 64 + 16 * 8)
    assert rep["cycles"] > 0 and rep["model_cycles"] > 0 and 0 < rep["bandwidth_fraction"] < 1
    assert set(rep["utilization"]["gate_proj"]) == {"active", "stalled", "finish"}
    assert 0 < rep["utilization"]["gate_proj"]["finish"] <= rep["cycles"]
    assert rep["bound"]["binding"] in ("compute", "dram", "port") and 0 < rep["bound"]["cycles"] <= rep["cycles"]
    assert rep["bound"]["fraction"] == round(rep["bound"]["cycles"] / rep["cycles"], 4)
    # --pipeline: the same fabric with its function stages: the same outputs, a few cycles more, the model too
    code, out, _ = run_cli(capsys, "sim", "swiglu", "--batch", "16", "--hidden", "8", "--inter", "64", "--tile-b", "8",
                           "--tile-inter", "16", "--backend", "amaranth", "--pipeline", "--json")
    piped = json.loads(out)
    assert code == 0 and piped["outputs_match"] and piped["offchip_bytes"] == rep["offchip_bytes"]
    assert rep["cycles"] < piped["cycles"] < 1.1 * rep["cycles"], (rep["cycles"], piped["cycles"])
    assert rep["model_cycles"] < piped["model_cycles"]


def test_sim_prints_its_summary_on_amaranth(capsys):
    """Without --json (the README's quick start prints this): the cycles, the model beside them and the bound."""
    code, out, err = run_cli(capsys, "sim", "swiglu", "--batch", "16", "--hidden", "8", "--inter", "64", "--tile-b",
                             "8", "--tile-inter", "16", "--backend", "amaranth")
    assert code == 0, err
    assert re.search(r"^swiglu: [\d,]+ cycles \(amaranth\), outputs match the interpreter and the expected outputs$", out, re.M), out
    assert re.search(r"^  approximate model: [\d,]+ cycles \([+-]\d+\.\d %\)$", out, re.M), out
    assert "busiest units: " in out and "on-chip buffers: " in out


def test_build_writes_the_files_and_fp32_silu_is_refused(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "build", "swiglu", "--batch", "16", "--hidden", "8", "--inter", "64",
                           "--tile-b", "8", "--tile-inter", "16", "-o", str(tmp_path / "b"), "--json")
    rep = json.loads(out)
    assert code == 0 and (tmp_path / "b" / "run.py").exists() and (tmp_path / "b" / "harness.v").exists()
    assert len(rep["units"]) == 22 and rep["config_writes"] > 0
    code, _, err = run_cli(capsys, "sim", "swiglu", "--dtype", "fp32", "--backend", "amaranth")
    assert code == 2 and "Map 'silu': no unit can run it on this fabric" in err
    assert "function 'silu' on fp32 tiles has no hardware (it builds bf16 floats)" in err


SMALL_SWIGLU = ("swiglu", "--batch", "16", "--hidden", "8", "--inter", "64", "--tile-b", "8", "--tile-inter", "16")


def test_build_never_overwrites_a_users_files(capsys, tmp_path):
    """A folder holding files build did not write is refused before any work, its files untouched; --force
    writes build's files into it; a folder build wrote is written again; a file in the way or a path that
    cannot be made is refused by name."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text("my own")
    code, out, err = run_cli(capsys, "build", *SMALL_SWIGLU, "-o", str(mine))
    assert code == 2 and (mine / "config.json").read_text() == "my own" and not (mine / "top.v").exists()
    assert f"OutputError: -o {mine}: the folder holds files step-hdl build did not write (config.json); choose a " \
           "new or empty folder, or pass --force" in err and "Traceback" not in err
    code, out, _ = run_cli(capsys, "build", *SMALL_SWIGLU, "-o", str(mine), "--force", "--json")
    assert code == 0 and "config.json" in json.loads(out)["files"] and (mine / "top.v").exists()
    fresh = tmp_path / "fresh" / "deeper"
    for _ in range(2):      # a new folder, then the same one again: it is build's own
        code, out, _ = run_cli(capsys, "build", *SMALL_SWIGLU, "-o", str(fresh))
        assert code == 0 and out.startswith(f"wrote {fresh}: top.v, harness.v, config.json")
    (tmp_path / "plain").write_text("x")
    code, _, err = run_cli(capsys, "build", *SMALL_SWIGLU, "-o", str(tmp_path / "plain"))
    assert code == 2 and "a file of that name exists; build writes a folder" in err
    code, _, err = run_cli(capsys, "build", *SMALL_SWIGLU, "-o", str(tmp_path / "plain" / "sub"))
    assert code == 2 and "cannot write there" in err and "Traceback" not in err


def test_help_imports_neither_sympy_nor_amaranth():
    """``step-hdl --help`` and argument errors start fast: building the parser for any command but ``synth``
    (whose unit list reads the hardware library) leaves the heavy libraries unimported (issue 24)."""
    import subprocess
    import sys
    code = ("import sys; from step_hdl.flow.cli import parser; parser('sim'); "
            "print(sorted(m for m in ('sympy', 'amaranth', 'step_hdl.graph') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("workload", ["swiglu", "moe", "gqa"])
def test_every_command_defaults_to_the_same_hardware(workload):
    """``model``, ``metrics``, ``run``, ``sim``, ``build`` and ``synth`` on the same arguments: int16 elements on
    4x4 physical tiles (the fabric the RTL builds), not fp32 here and int8 there (issue 24)."""
    from step_hdl.flow.cli import _target, parser
    seen = set()
    for command in ("metrics", "run", "model", "sim", "build", "synth"):
        args = parser(command).parse_args([command, workload])
        seen.add((args.dtype, _target(args).tile if hasattr(args, "phys_tile") else 4))
    assert seen == {("int16", 4)}


@pytest.mark.parametrize("workload", ["swiglu", "moe", "gqa"])
def test_every_workload_default_maps_onto_the_default_fabric(workload, routing, kv_files):
    """The defaults of every workload lower, plan and fit the fabric ``sim``, ``build`` and ``synth`` make
    (GQA's head dimension was 16: a [16, 4] random-load tile that did not map, issue 24)."""
    from step_hdl.flow import prepare
    from step_hdl.workloads.registry import build, defaults
    if workload == "moe":
        routing("mixtral_b64")
    if workload == "gqa":
        kv_files(16)
    w = build(workload, defaults(workload))
    prep = prepare(w, 4)
    assert w.dtype.name == "int16" and prep.design.fabric.tile == 4 and len(prep.design.units) > 20


def test_lazy_workload_names_stay_functions_after_their_modules_load():
    """``step_hdl.workloads`` imports its names when first used; a submodule loaded first (the registry loads
    ``workloads.swiglu`` to build one) does not replace the function of the same name."""
    import subprocess
    import sys
    code = ("import importlib; importlib.import_module('step_hdl.workloads.moe'); "
            "from step_hdl.workloads import moe, swiglu; print(callable(moe), callable(swiglu), moe.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True", "moe"]
