"""The score functions refuse parameters of another dtype than the query and keys, batch dimensions
that do not broadcast and integer inputs, each with one error naming what was given; broadcasting
batch dimensions and autocast's mixed dtypes still pass."""

from __future__ import annotations

import pytest
import torch

from attnlab import _checks
from attnlab import scores as S

Q, K = torch.randn(2, 3, 4), torch.randn(2, 5, 3)
KB = torch.randn(3, 5, 3)  # a batch of 3 against the query's 2
FLOAT = "must be a floating-point tensor (float16, bfloat16, float32 or float64); got dtype torch.int64"
BATCH = "batch dimensions (all but the last two) do not broadcast: query (2, 3, 4), key (3, 5, {d})"

DTYPE_CASES = [
    (lambda: S.general(Q, K, torch.randn(4, 3, dtype=torch.float64)),
     "query, key, weight must share one dtype; got query torch.float32, key torch.float32, weight torch.float64 "
     "(convert with .to(dtype))"),
    (lambda: S.additive(Q, K, torch.randn(5, 4, dtype=torch.float64), torch.randn(5, 3), torch.randn(5)),
     "query, key, w_q, w_k, v must share one dtype; got query torch.float32, key torch.float32, w_q torch.float64, "
     "w_k torch.float32, v torch.float32 (convert with .to(dtype))"),
    (lambda: S.concat(Q, K, torch.randn(5, 7), torch.randn(5, dtype=torch.float16)),
     "query, key, weight, v must share one dtype; got query torch.float32, key torch.float32, weight torch.float32, "
     "v torch.float16 (convert with .to(dtype))"),
    (lambda: S.general(Q.long(), K.long(), torch.randn(4, 3).long()), "query " + FLOAT),
    (lambda: S.general(Q, K, torch.randn(4, 3).long()), "weight " + FLOAT),
    (lambda: S.concat(Q.long(), K.long(), torch.randn(5, 7).long(), torch.randn(5).long()), "query " + FLOAT),
    (lambda: S.dot(Q, torch.randn(2, 5, 4).long()), "key " + FLOAT),
]

BATCH_CASES = [
    (lambda: S.dot(Q, torch.randn(3, 5, 4)), BATCH.format(d=4)),
    (lambda: S.scaled_dot(Q, torch.randn(3, 5, 4)), BATCH.format(d=4)),
    (lambda: S.general(Q, KB, torch.randn(4, 3)), BATCH.format(d=3)),
    (lambda: S.additive(Q, KB, torch.randn(5, 4), torch.randn(5, 3), torch.randn(5)), BATCH.format(d=3)),
    (lambda: S.concat(Q, KB, torch.randn(5, 7), torch.randn(5)), BATCH.format(d=3)),
]


@pytest.mark.parametrize("call,message", DTYPE_CASES)
def test_a_parameter_or_input_of_another_dtype_is_one_dtype_error(call, message):
    with pytest.raises(_checks.DtypeError) as e:
        call()
    assert str(e.value) == message


@pytest.mark.parametrize("call,message", BATCH_CASES)
def test_batches_that_do_not_broadcast_are_one_value_error(call, message):
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value) == message


def test_broadcasting_batches_and_autocast_still_pass():
    q, k, w = torch.randn(2, 1, 3, 4), torch.randn(1, 6, 5, 3), torch.randn(4, 3)
    got = S.general(q, k, w)
    assert got.shape == (2, 6, 3, 5)
    torch.testing.assert_close(got, torch.einsum("...qd,de,...ke->...qk", q, w, k))  # e_ij = q_iᵀ W k_j
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert S.general(Q, K, torch.randn(4, 3).bfloat16()).shape == (2, 3, 5)


def test_the_attentional_output_refuses_integer_inputs_and_mixed_dtypes():
    from attnlab.functional import attentional_output

    c, s, w = torch.randn(2, 3), torch.randn(2, 2), torch.randn(4, 5)
    with pytest.raises(_checks.DtypeError) as e:
        attentional_output(c.long(), s.long(), w)
    assert str(e.value) == "context " + FLOAT
    with pytest.raises(_checks.DtypeError) as e:
        attentional_output(c.double(), s, w)
    assert str(e.value) == ("context, state, weight must share one dtype; got context torch.float64, state torch.float32, "
                            "weight torch.float32 (convert with .to(dtype))")
    torch.testing.assert_close(attentional_output(c, s, w), torch.tanh(torch.cat([c, s], -1) @ w.T))


def test_target_attention_refuses_parameters_of_another_dtype():
    from attnlab.functional.target import target_attention

    args = [torch.randn(2, 4), torch.randn(2, 3, 4), torch.randn(5, 16), torch.randn(5), torch.randn(1),
            torch.randn(1, 5), torch.randn(1)]
    args[4] = args[4].double()
    with pytest.raises(_checks.DtypeError) as e:
        target_attention(*args)
    assert str(e.value) == ("candidate, history, w1, b1, prelu, w2, b2 must share one dtype; got candidate torch.float32, "
                            "history torch.float32, w1 torch.float32, b1 torch.float32, prelu torch.float64, "
                            "w2 torch.float32, b2 torch.float32 (convert with .to(dtype))")
