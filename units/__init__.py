"""Amaranth hardware units of the SDA fabric (``step_hdl.units``).

Units share the token model of :mod:`step_hdl.token`. The unit library itself
is tracked in its own issue; this package exists so that the namespace and
packaging are in place.
"""
