"""The sampler's distribution at the edges: a tiny temperature is (nearly) greedy, not NaN; bad settings are one clear
ValueError; the log-probabilities stay those of log_softmax(logits / T) (float64 reference)."""
import math

import pytest
import torch

from nanolit.engine import sample_next, sampling_logprobs


@pytest.mark.parametrize("t", [1e-39, 1e-30, 1e-8])
def test_tiny_temperature_is_greedy_not_nan(t):
    logits = torch.tensor([[3.0, 1.0, -2.0], [-1.0, 5.0, 4.999]])
    lp = sampling_logprobs(logits, temperature=t)
    assert not lp.isnan().any() and lp.argmax(-1).tolist() == [0, 1]     # was all NaN below ~1e-38
    assert sample_next(logits, temperature=t).tolist() == [0, 1]          # was "probability tensor contains inf/nan"


@pytest.mark.parametrize("t,k", [(0.6, None), (1.0, 2), (1.7, 5)])
def test_logprobs_equal_the_float64_reference(t, k):
    torch.manual_seed(0)
    logits = 4 * torch.randn(3, 11)
    ref = torch.log_softmax(logits.double() / t, -1)
    if k: ref = torch.log_softmax((logits.double() / t).masked_fill(logits < logits.topk(k, -1).values[:, -1:], -math.inf), -1)
    torch.testing.assert_close(sampling_logprobs(logits, temperature=t, top_k=k).double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kw", [dict(temperature=math.inf), dict(temperature=math.nan), dict(temperature=-1.0),
                                dict(top_k=2.5), dict(top_k=True), dict(top_k=-1), dict(top_p=0.0)])
def test_bad_settings_are_one_clear_error(kw):
    with pytest.raises(ValueError, match="temperature|top_k|top_p"):
        sample_next(torch.zeros(1, 4), **kw)
