"""Simulation (``step_hdl.sim``): approximate performance model, RTL drivers, cross-validation.

Not implemented yet; tracked in its own issue.
"""
