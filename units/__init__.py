"""Amaranth hardware units of the SDA fabric (``step_hdl.units``).

Every unit is a ``wiring.Component`` with ``lib.stream`` ports of the token layout of ``layout``, a
configuration port (``config``) and frozen, validated parameters (``params``); ``base`` is their common base.
The families: ``stream`` and ``merger`` (FIFOs, slices, broadcast, the stop merger), ``shape``, ``routing``,
``compute`` with ``functions``, ``pipeline`` and ``floats`` (maps, accumulators, the hardware functions),
``matmul``, ``offchip`` and ``onchip`` with ``address`` (loads, stores, on-chip buffers), ``pool`` and
``pooled`` (tile pools), ``source``; ``memport`` is the memory port. ``catalog`` lists every unit with a
stimulus, ``formal`` proves the stream contract, ``verilog`` converts a component to Verilog.
``docs/units.md`` has the conventions.
"""
