"""Token encoding of spec section 1."""

import numpy as np
import pytest

from step_hdl.token import DONE, data, decode, encode, format_tokens, stop


def text(tokens):
    return " ".join("D" if t.done else f"S{t.stop}" if t.stop else str(t.payload) for t in tokens)


@pytest.mark.parametrize("nested, rank, want", [
    (["a", "b", "c"], 0, "a b c D"),                                   # rank 0, shape [3]
    ([["a", "b", "c"], ["d", "e", "f"]], 1, "a b c S1 d e f S1 D"),    # rank 1, shape [2, 3]
    ([[["a", "b", "c"], ["d", "e", "f"]]], 2, "a b c S1 d e f S2 D"),  # rank 2, shape [1, 2, 3]
    ([["a", "b"], ["c"]], 1, "a b S1 c S1 D"),                          # ragged [2, (2|1)]
    ([[], ["a"]], 1, "S1 a S1 D"),                                      # empty D0 run
    ([], 1, "D"),                                                       # empty stream
    ([[["a"], []], [["b"]]], 2, "a S1 S2 b S2 D"),                      # empty inner vector
])
def test_spec_examples(nested, rank, want):
    toks = encode(nested, rank)
    assert text(toks) == want
    assert decode(toks, rank) == nested


def test_decode_rejects_malformed():
    with pytest.raises(ValueError, match="S2 but the stream has rank 1"):
        decode([data(1), stop(2), DONE], 1)
    with pytest.raises(ValueError, match="no done"):
        decode([data(1)], 0)
    with pytest.raises(ValueError, match="open dimension"):
        decode([data(1), DONE], 1)
    with pytest.raises(ValueError, match="after done"):
        decode([DONE, data(1)], 0)


def test_token_equality_compares_tiles_exactly():
    a = data(np.ones((2, 2), np.int16))
    assert a == data(np.ones((2, 2), np.int16))
    assert a != data(np.ones((2, 2), np.int32))        # dtype matters
    assert a != data(np.ones((2, 1), np.int16))        # shape matters
    assert stop(1) != stop(2) and DONE == DONE
    assert "S1" in format_tokens([data(np.ones((1, 1))), stop(1), DONE])
