"""Sampling values at their edges: refused when they mean nothing, the limit they approach otherwise."""

import math

import pytest
import torch

from model.sampling import check_sampling_args
from tests.helpers import assert_one_line_error, cli_all, draw, tiny_model

NON_FINITE = [math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("value", NON_FINITE)
def test_non_finite_temperature_and_top_p_are_refused_by_the_python_api(value):
    model = tiny_model()
    idx = torch.zeros(1, 1, dtype=torch.long)
    for kwargs in ({"temperature": value}, {"top_p": value}):
        with pytest.raises(ValueError, match="finite"):
            check_sampling_args(5, kwargs.get("temperature", 1.0), None, kwargs.get("top_p"))
        with pytest.raises(ValueError, match="finite"):
            model.generate(idx, 5, **kwargs)


@pytest.mark.parametrize("top_k", [0, -3, 2.5, math.inf, True])
def test_top_k_must_be_a_positive_integer(top_k):
    with pytest.raises(ValueError, match="top_k"):
        check_sampling_args(5, 1.0, top_k, None)


@pytest.mark.parametrize("temperature", [1e-8, 1e-30, 1e-38, 1e-40, 1e-300, 5e-324])
def test_a_tiny_temperature_is_greedy_not_overflow(temperature):
    torch.manual_seed(0)
    logits = torch.randn(4, 300) * 8
    assert torch.equal(draw(logits, temperature), logits.argmax(dim=-1, keepdim=True))


def test_a_huge_temperature_samples_nearly_uniformly_without_nan():
    torch.manual_seed(0)
    logits = torch.randn(1, 50) * 8
    ids = torch.cat([draw(logits, 1e30) for _ in range(2000)])
    assert ids.unique().numel() > 45  # every id reachable, none NaN-stuck


def test_a_temperature_float32_cannot_hold_is_refused_and_its_largest_value_samples():
    """The Sampler computes in float32 on every device: 1e39 is a finite Python number that it cannot hold."""
    model, idx = tiny_model(), torch.zeros(1, 1, dtype=torch.long)
    for temperature in (1e39, 3.5e38, 10**39):
        with pytest.raises(ValueError, match=r"temperature must be .* float32 holds \(at most 3.40282e\+38\)"):
            model.generate(idx, 5, temperature=temperature)
    largest = torch.finfo(torch.float32).max
    torch.manual_seed(0)
    ids = torch.cat([draw(torch.randn(1, 50) * 8, largest) for _ in range(2000)])
    assert ids.unique().numel() > 45  # nearly uniform, as a huge temperature samples


def test_generate_refuses_non_finite_and_out_of_range_values_in_one_line(tmp_path):
    bad = [
        "temperature=nan",
        "temperature=inf",
        "temperature=-inf",
        "temperature=-1",
        "temperature=1e39",
        "top_p=nan",
        "top_p=inf",
        "top_p=0",
        "top_p=1.5",
        "top_k=0",
        "top_k=inf",
        "max_new_tokens=-5",
        "max_new_tokens=1e11",
        "num_samples=0",
        "seed=-1",
        "use_cache=maybe",
        "device=tpu",
    ]
    results = cli_all(*[("generate.py", f"ckpt={tmp_path / 'no_run'}", value) for value in bad])
    for value, r in zip(bad, results, strict=True):
        assert_one_line_error(r, value.split("=")[0])
