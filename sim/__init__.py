"""Simulation (``step_hdl.sim``): the RTL simulation of a mapped program, and the approximate model.

``fabric`` (run a prepared program in RTL: the harness, ``run``, ``RtlResult``), ``dram`` (the simulation-only
DRAM model behind every memory port), ``faults`` (random DRAM latency and back-pressure), ``rtl`` (cached
Verilator and Icarus builds, unit scenarios on any back-end), ``cocotb_fabric`` (the fabric's cocotb test,
also written by ``step-hdl build``), ``emit`` (``step-hdl build``'s folder), ``streams``, ``cocotb_streams``
and ``stalls`` (unit drivers with random stalls). ``model`` (a subpackage, a layer below the rest): the
approximate performance model and the DRAM timing both share.
"""
