"""Check a hardware unit against the reference interpreter, token for token, under random stalls."""

from __future__ import annotations

from step_hdl.interp import run_operator
from step_hdl.sim.rtl import run_scenario
from step_hdl.sim.streams import Scenario
from step_hdl.token import format_tokens
from step_hdl.units.base import lang_port

SEEDS = (0, 1, 2)


def check_unit(unit, kind: str, inputs: dict, op_params: dict, config: list[int] | None = None,
               backend: str = "amaranth", seeds=SEEDS, p_gap: float = 0.3, p_drop: float = 0.3,
               tensors=None, declare=None, name: str | None = None, expected: dict | None = None,
               platform=None, models: str = ""):
    """Run ``unit`` on ``inputs`` ({language port: (StreamType, tokens)}) with random valid gaps and
    ready drops for each seed; compare every output port with the interpreter's ``kind`` operator (or with
    ``expected``, {language port: tokens}, for a unit that runs a chain of operators).

    ``platform``, ``models``: elaborate the unit for a platform, simulated with its primitives' Verilog
    models (:func:`~step_hdl.sim.rtl.run_scenario`).

    Returns the cycle counts per seed.
    """
    if expected is None:
        expected = run_operator(kind, inputs, tensors=tensors, declare=declare, **op_params)
    if config is None:  # what the mapper would write for this node
        config = unit.configure(op_params, {port: st for port, (st, _) in inputs.items()})
    packed = unit.pack_inputs(inputs)
    outs = unit.output_done_bits()
    cycles = []
    for seed in seeds:
        sc = Scenario(packed, outs, config, seed=seed, p_gap=p_gap, p_drop=p_drop)
        got, n = run_scenario(unit, sc, backend, name or f"{type(unit).__name__.lower()}_dut",
                              platform=platform, models=models)
        cycles.append(n)
        for hp in outs:
            want = expected[lang_port(hp)]
            tokens = unit.fmt(hp).unpack_all(got[hp])
            if tokens != want:
                raise AssertionError(f"{type(unit).__name__} port {hp} (seed {seed}, {backend}):\n"
                                     f"  got  {format_tokens(tokens, 60)}\n  want {format_tokens(want, 60)}")
    return cycles
