"""Graph-to-fabric mapping (``step_hdl.mapper``).

``tiling`` (hierarchical tiling to physical tiles), ``fifo`` (FIFO depths),
``fabric`` (fabric description), ``binding`` (node -> unit), ``lower`` (the
checked pass flow), ``top`` (design, configuration image, the top-level
component), ``prepare`` (a program ready to run: memory image, reference outputs).
"""
