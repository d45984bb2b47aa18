"""Graph-to-fabric mapping (``step_hdl.mapper``): lowering passes, binding, top level, Verilog.

Not implemented yet; tracked in its own issue.
"""
