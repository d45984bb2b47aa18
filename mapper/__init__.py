"""Graph-to-fabric mapping (``step_hdl.mapper``).

``tiling`` (hierarchical tiling to physical tiles), ``fifo`` (FIFO depths),
``fabric`` (fabric description), ``binding`` (node -> unit), ``lower`` (the
checked pass flow), ``top`` (design, configuration image, the top-level
component), ``prepare`` (a program ready to run: memory image, reference outputs).
"""

#: the physical tile side when none is given, everywhere (API, command line, model, sweeps): small tiles build
#: and simulate fast; the paper's 16x16 studies say 16 explicitly
DEFAULT_TILE = 4
