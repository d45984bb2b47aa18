"""Shape units against the interpreter, under random stalls, on any --sim back-end."""

import numpy as np
import pytest

from step_hdl import dyn
from step_hdl.types import Ragged
from step_hdl.units.params import StreamParams
from step_hdl.units.shape import Flatten

from helpers import ints, toks
from hw.harness import check_unit

L = Ragged("L", integer=True, nonnegative=True)
P = StreamParams(rows=1, cols=1, dtype="int32", max_rank=3)


@pytest.mark.parametrize("lo, hi, st, text", [
    (0, 1, ints(2, 2, 3), "1 2 3 S1 4 5 6 S2 7 8 9 S1 1 2 3 S2 D"),
    (1, 2, ints(2, 2, 3), "1 2 3 S1 4 5 6 S2 7 8 9 S1 1 2 3 S2 D"),
    (0, 2, ints(2, 2, 3), "1 2 3 S1 4 5 6 S2 7 8 9 S1 1 2 3 S2 D"),
    (0, 1, ints(3, L), "1 2 S1 S1 3 S1 D"),                     # ragged with an empty run
    (1, 3, ints(2, 1, 2, L), "1 S1 S2 2 3 S3 S1 4 S3 D"),         # several stop levels
])
def test_flatten(sim_backend, lo, hi, st, text):
    unit = Flatten(P)
    check_unit(unit, "Flatten", {"in": (st, toks(text))}, dict(lo=lo, hi=hi), backend=sim_backend)
