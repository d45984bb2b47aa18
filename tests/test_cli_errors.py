"""Bad input on the command line, a row each: the exit status, what the one-line message must say (the argument,
node or file; what was given; what is expected), and never a traceback. The language's own errors have their
table in ``tests/test_errors.py``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from step_hdl.flow.cli import main

SWIGLU = ("swiglu", "--batch", "16", "--hidden", "8", "--inter", "64", "--tile-b", "8", "--tile-inter", "16")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Bad files of every kind, and a good graph file with its inputs to spoil."""
    d = tmp_path_factory.mktemp("bad")
    (d / "corrupt.json").write_text("{not json")
    (d / "empty.json").write_text("[]")
    (d / "fabric_type.json").write_text(json.dumps({"tile": "four"}))
    (d / "fabric_unknown.json").write_text(json.dumps({"tile": 4, "tiles": 4}))
    (d / "fabric_8.json").write_text(json.dumps({"tile": 8}))
    (d / "binary.npz").write_bytes(bytes(range(256)) * 4)
    (d / "mine").mkdir()
    (d / "mine" / "notes.txt").write_text("my own")
    (d / "a_file").write_text("x")
    assert main(["export", *SWIGLU, "--dtype", "int16", "-o", str(d / "g.json"), "--inputs", str(d / "g.npz")]) == 0
    good = dict(np.load(d / "g.npz"))
    np.savez(d / "neg.npz", **{**good, "binding.B": np.array(-3)})
    np.savez(d / "rows.npz", **{**good, "x": good["x"][:3]})
    np.savez(d / "type.npz", **{**good, "x": good["x"].astype(np.float32)})
    return d


# (id, argv with {d} for the files folder, exit status, substrings of stderr)
CASES = [
    # numbers out of range: named by option, value and what is expected
    ("phys-tile-negative", ["model", "swiglu", "--phys-tile", "-1"], 2, ["--phys-tile", "expected an integer >= 1", "-1"]),
    ("phys-tile-zero", ["model", "swiglu", "--phys-tile", "0"], 2, ["--phys-tile", "expected an integer >= 1, got 0"]),
    ("phys-tile-text", ["sim", "swiglu", "--phys-tile", "four"], 2, ["--phys-tile", "got 'four'"]),
    ("tokens-negative", ["run", "moe", "--tokens", "-3"], 2, ["--tokens: expected an integer >= 0, got -3"]),
    ("scale-zero", ["run", "gqa", "--scale", "0"], 2, ["--scale: expected an integer >= 1, got 0"]),
    ("experts-per-region-zero", ["run", "moe", "--experts-per-region", "0"], 2,
     ["--experts-per-region: expected an integer >= 1, got 0"]),
    ("hidden-zero", ["metrics", "swiglu", "--hidden", "0"], 2, ["--hidden: expected an integer >= 1, got 0"]),
    ("kv-trace-index", ["run", "gqa", "--kv-trace", "999"], 2, ["kv-trace 999: batch 16 has", "traces (0 to"]),
    ("kv-batch", ["run", "gqa", "--batch", "17"], 2, ["no KV-length traces for batch 17", "batches with traces"]),
    ("freq-zero", ["synth", "swiglu", "--freq", "0"], 2, ["--freq", "expected a number > 0"]),
    ("max-steps-zero", ["run", "swiglu", "--max-steps", "0"], 2, ["--max-steps", "expected an integer >= 1"]),
    ("max-steps-hit", ["run", *SWIGLU, "--max-steps", "10"], 2,
     ["interpreter stopped after 10 steps without finishing (max_steps)"]),
    ("huge", ["run", "swiglu", "--batch", "1000000", "--hidden", "1000000"], 2, ["out of memory", "smaller sizes"]),
    ("dtype-choice", ["run", "swiglu", "--dtype", "fp16"], 2, ["--dtype", "invalid choice: 'fp16'"]),
    ("sizes-misfit", ["run", "swiglu", "--tile-b", "5"], 2, ["LinearOffChipLoad 'load_x': tile rows 5 does not divide tensor 'x' rows 64"]),
    ("fp32-silu-in-rtl", ["sim", *SWIGLU, "--dtype", "fp32", "--backend", "amaranth"], 2,
     ["Map 'silu': no unit can run it on this fabric", "'silu' on fp32 tiles has no hardware"]),
    # files: named, with what is wrong with them
    ("fabric-missing", ["sim", "swiglu", "--fabric", "{d}/missing.json"], 2,
     ["cannot read fabric file '{d}/missing.json': No such file or directory"]),
    ("fabric-folder", ["sim", "swiglu", "--fabric", "{d}"], 2, ["cannot read fabric file '{d}': Is a directory"]),
    ("fabric-field-type", ["sim", "swiglu", "--fabric", "{d}/fabric_type.json"], 2,
     ["fabric file {d}/fabric_type.json", "tile must be an integer >= 1, got 'four'"]),
    ("fabric-unknown-field", ["build", "swiglu", "--fabric", "{d}/fabric_unknown.json", "-o", "{d}/out1"], 2,
     ["fabric file {d}/fabric_unknown.json", "unknown field(s) ['tiles']"]),
    ("phys-tile-against-fabric", ["model", "swiglu", "--fabric", "{d}/fabric_8.json", "--phys-tile", "4"], 2,
     ["--phys-tile 4 and --fabric {d}/fabric_8.json (tile 8) disagree: give one of them"]),
    ("fabric-corrupt", ["sim", "swiglu", "--fabric", "{d}/corrupt.json"], 2,
     ["fabric file {d}/corrupt.json", "not valid JSON"]),
    ("graph-corrupt", ["run", "{d}/corrupt.json"], 2, ["graph file '{d}/corrupt.json'", "not valid JSON"]),
    ("graph-not-object", ["run", "{d}/empty.json"], 2, ["graph file '{d}/empty.json'", "an object with a list"]),
    ("graph-missing", ["run", "{d}/missing.json"], 2, ["cannot read graph file '{d}/missing.json'"]),
    ("inputs-missing", ["run", "{d}/g.json", "--inputs", "{d}/missing.npz"], 2,
     ["cannot read inputs '{d}/missing.npz'"]),
    ("inputs-binary", ["run", "{d}/g.json", "--inputs", "{d}/binary.npz"], 2, ["inputs '{d}/binary.npz'"]),
    ("binding-negative", ["run", "{d}/g.json", "--inputs", "{d}/neg.npz"], 2,
     ["'binding.B' must be a non-negative integer"]),
    ("tensor-rows", ["run", "{d}/g.json", "--inputs", "{d}/rows.npz"], 2,
     ["off-chip tensor 'x': declared rows 16, array has 3"]),
    ("tensor-type", ["sim", "{d}/g.json", "--inputs", "{d}/type.npz"], 2, ["off-chip tensor 'x': expected int16"]),
    ("rtl-json-empty", ["compare", "swiglu", "--rtl-json", "{d}/empty.json"], 2, ["no measured points"]),
    ("rtl-json-corrupt", ["compare", "moe", "--rtl-json", "{d}/corrupt.json"], 2,
     ["{d}/corrupt.json is not valid JSON"]),
    # outputs: checked before the work, never over a user's files
    ("build-into-users-folder", ["build", *SWIGLU, "-o", "{d}/mine"], 2,
     ["-o {d}/mine: the folder holds files step-hdl build did not write (notes.txt)", "--force"]),
    ("build-onto-a-file", ["build", *SWIGLU, "-o", "{d}/a_file"], 2, ["a file of that name exists"]),
    ("build-under-a-file", ["build", *SWIGLU, "-o", "{d}/a_file/x"], 2, ["-o {d}/a_file/x: cannot write there"]),
    ("plot-missing-folder", ["compare", "swiglu", "--rtl-json", "{d}/empty.json", "--plot", "{d}/no/p.png"], 2,
     ["--plot {d}/no/p.png: the folder {d}/no does not exist"]),
    ("plot-is-folder", ["compare", "swiglu", "--rtl-json", "{d}/empty.json", "--plot", "{d}"], 2,
     ["--plot {d}: is a folder"]),
    ("draw-missing-folder", ["draw", "swiglu", "-o", "{d}/no/g.dot"], 2, ["-o {d}/no/g.dot: the folder"]),
    ("export-inputs-missing-folder", ["export", "swiglu", "-o", "{d}/x.json", "--inputs", "{d}/no/i.npz"], 2,
     ["--inputs {d}/no/i.npz: the folder {d}/no does not exist"]),
    ("unknown-workload", ["run", "resnet"], 2, ["invalid choice: 'resnet'"]),
    ("unknown-option", ["run", "swiglu", "--batches", "3"], 2, ["unrecognized arguments: --batches 3"]),
]


@pytest.mark.parametrize("case_id, argv, code, says", CASES, ids=[c[0] for c in CASES])
def test_bad_input(capsys, files, kv_files, case_id, argv, code, says):
    if case_id.startswith("kv-"):
        kv_files(16)        # the errors name the traces there are: a skip where there are none
    argv = [a.replace("{d}", str(files)) for a in argv]
    try:
        got = main(argv)
    except SystemExit as exc:          # argparse's own errors
        got = exc.code
    out = capsys.readouterr()
    assert got == code, (got, out.err)
    for s in says:
        assert s.replace("{d}", str(files)) in out.err, (s, out.err)
    assert "Traceback" not in out.err + out.out
    assert len([line for line in out.err.splitlines() if line.startswith("step-hdl")]) <= 1


def test_the_users_files_are_untouched(files):
    assert (files / "mine" / "notes.txt").read_text() == "my own" and not (files / "mine" / "top.v").exists()
    assert (files / "a_file").read_text() == "x"
