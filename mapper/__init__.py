"""Graph-to-fabric mapping (``step_hdl.mapper``): from a STeP graph to the hardware that runs it.

``fabric`` (the Fabric description), ``sizing`` (a fabric sized to fit: ``fabric_for``, ``FitFabric``),
``tiling`` (logical tiles to physical tiles), ``lower`` (the checked pass flow: ``Lowered``), ``binding`` (node ->
unit), ``fusion`` (which nodes one unit runs), ``latency`` (their pipeline cycles), ``pools`` (tile pools),
``fifo`` (FIFO depths), ``adapters`` (a unit's parameters and configuration from a node), ``design`` (Design,
Program), ``plan`` (the design and program of a lowered graph, the off-chip layout), ``prepare`` (a program
ready to run: memory image, reference outputs), ``top`` (FabricTop, the synthesizable top level),
``instruments`` (testbench counters and sampler), ``shared`` and ``verilog`` (one Verilog module per unit
design).
"""

#: the physical tile side when none is given, everywhere (API, command line, model, sweeps): small tiles build
#: and simulate fast; the paper's 16x16 studies say 16 explicitly
DEFAULT_TILE = 4
