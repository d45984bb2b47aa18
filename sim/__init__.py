"""Simulation (``step_hdl.sim``).

``model`` (approximate performance model), ``dram`` (simulation-only DRAM
model, the same parameters as the model's), ``fabric`` (run a mapped program
in RTL: Amaranth simulator or cocotb with Verilator/Icarus), ``streams`` /
``cocotb_streams`` (unit-level drivers with random stalls), ``cocotb_fabric``
(the fabric testbench, also written out by ``step-hdl build``), ``rtl``
(Verilog, cached cocotb builds).
"""
