"""The pages a newcomer reads stay true: the README's shape and its program, the generated status page and the
measurements it comes from, and a page for every command and benchmark."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _bench(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_short_and_its_quick_start_is_two_commands():
    lines = README.splitlines()
    assert len(lines) <= 120, len(lines)
    assert [k + 1 for k, line in enumerate(lines) if len(line) > 120] == []
    quick = README.split("## Quick start", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    assert quick.splitlines() == [
        "pip install -e . && step-hdl sim swiglu --batch 16 --hidden 64 --inter 128 --tile-b 8 --tile-inter 32",
        "python -m pytest"]
    # no dated figures or commit hashes: the measured figures live in docs/status.md
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b|\bcommit [0-9a-f]{7}", README)


def test_readme_program_runs_bit_exact():
    """The README's own program, as written (on the Amaranth simulator instead of a Verilator build)."""
    code = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    namespace: dict = {}
    exec(code.replace('run_rtl(prep, "verilator")', 'run_rtl(prep, "amaranth")'), namespace)
    assert namespace["res"].outputs_match and namespace["res"].cycles > 0 and namespace["m"].cycles > 0


def test_status_page_is_what_the_committed_json_gives():
    """``python bench/status.py`` writes docs/status.md from the committed measurements; a page edited by hand,
    or JSON measured again without the page, fails here."""
    assert (ROOT / "docs" / "status.md").read_text() == _bench("status").render(), \
        "docs/status.md is out of date: run python bench/status.py"


def test_the_committed_crossval_json_is_the_current_models():
    """bench/data/crossval.json's model cycles are what the model gives today on the stored RTL points (a
    change to the model's timing measures the page again)."""
    from step_hdl.flow.compare import compare, load_rtl_json
    stored = json.loads((ROOT / "bench" / "data" / "crossval.json").read_text())
    now = compare(load_rtl_json(ROOT / "bench" / "data" / "crossval-rtl.json"))
    assert [p["model_cycles"] for p in now.points] == [p["model_cycles"] for p in stored["points"]], \
        "the model's cycles changed: python bench/crossval.py --rtl-json bench/data/crossval-rtl.json " \
        "--json bench/data/crossval.json, then python bench/status.py"


def test_every_command_has_its_section():
    from step_hdl.flow.cli import COMMANDS
    page = (ROOT / "docs" / "commands.md").read_text()
    assert [c for c in COMMANDS if f"\n## {c}\n" not in page] == []


def test_every_benchmark_is_listed():
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    scripts = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "bench").rglob("*.py")
                     if p.name != "paper_common.py")
    assert [s for s in scripts if f"`{s}" not in page] == []


@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "docs").glob("*.md")))
def test_every_doc_page_is_linked_from_the_readme(page):
    assert page in README or re.sub(r"-[a-z-]+\.md$", "-*.md", page) in README, page


def test_the_function_reference_is_the_registry():
    """docs/functions.md is generated from the function registry: a function added, or a parameter, a docstring
    or a FLOP rule changed without the page, fails here."""
    from step_hdl.flow.functions_page import render
    from step_hdl.functions import FUNCTIONS
    page = (ROOT / "docs" / "functions.md").read_text()
    assert page == render(), "docs/functions.md is out of date: run python -m step_hdl.flow.functions_page"
    assert all(f"| `{name}` |" in page for name in FUNCTIONS)


def test_every_graph_builder_method_is_in_the_language_page():
    """docs/language.md lists each public ``Graph`` builder method with the operator it adds."""
    import inspect
    from step_hdl import Graph
    page = (ROOT / "docs" / "language.md").read_text()
    table = page.split("## Building a graph", 1)[1].split("\n## ", 1)[0]
    skip = {"validate", "edges", "topological_order", "dumps", "from_json", "to_json", "to_dot", "stored_tensors",
            "input_tensors", "cyclic_nodes"}
    methods = [n for n, m in inspect.getmembers(Graph, inspect.isfunction) if not n.startswith("_") and n not in skip]
    assert [n for n in methods if f"`g.{n}(" not in table] == []
