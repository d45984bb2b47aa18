"""Graph-to-fabric mapping (``step_hdl.mapper``).

``tiling`` (hierarchical tiling to physical tiles), ``fifo`` (FIFO depths),
``fabric`` (fabric description), ``binding`` (node -> unit), ``flow`` (the
checked pass flow), ``top`` (design, configuration image, the top-level
component), ``emit`` (``step-hdl build``: Verilog, configuration, testbench).
"""
