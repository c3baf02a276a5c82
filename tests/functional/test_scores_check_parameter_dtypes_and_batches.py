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
