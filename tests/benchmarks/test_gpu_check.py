"""`python -m benchmarks.gpu_check` without a GPU, and its arguments: one line, exit 2 (the card's numbers come from
a run on a card: docs/en/speed.md)."""

import pytest
import torch

from tests.helpers import assert_one_line_error, cli


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_it_refuses_without_a_cuda_gpu_in_one_line():
    r = cli("-m", "benchmarks.gpu_check")
    assert_one_line_error(r, "benchmarks.gpu_check measures a CUDA GPU and this machine has none")


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--nanogpt", "/no/such/checkout"), "--nanogpt /no/such/checkout: no model.py there"),
        (("--seconds", "0"), "--seconds=0 is invalid: it must be a finite number > 0"),
        (("--skip", "everything"), "invalid choice: 'everything'"),
    ],
)
def test_bad_arguments_are_one_line(args, needle):
    assert_one_line_error(cli("-m", "benchmarks.gpu_check", *args), needle)
