"""FPGA flow (``step_hdl.fpga``): synthesis, place-and-route, resource and timing reports.

Not implemented yet; tracked in its own issue.
"""
