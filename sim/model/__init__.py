"""The approximate performance model: the program the mapper produced, timed as processes.

``core`` runs the graph's operators as timed processes on the mapper's lowering
(its FIFO depths, units' pipeline cycles and off-chip layout), ``memory`` times
their off-chip transfers through ``dram``'s DRAM timing (the RTL's DRAM model
takes the same parameters, :class:`DramParams`), and ``bounds`` gives the lower
bound on cycles beside every result. The flow API (``step_hdl.flow.model``)
is the way in; ``docs/architecture.md`` says how it is timed.
"""

from step_hdl.lazy import lazy_exports

# imported when first used: the command line reads the DRAM presets without the model's imports (sympy)
_EXPORTS = {"bounds": ["CycleBound", "cycle_bound"], "core": ["Model", "ModelParams", "ModelResult", "simulate"],
            "dram": ["DRAM_PRESETS", "Dram", "DramParams"]}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
