"""model/dropout.py: nn.Dropout's semantics with a quarter of the random draws on the CPU."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from model import AttentionLanguageModel
from model.attention_kernels import attend, attend_with_dropout
from model.dropout import Dropout, dropout, keep_mask, lane_threshold


@pytest.mark.parametrize("p", [0.01, 0.08, 0.1, 0.5])
def test_each_lane_drops_at_the_asked_rate(p):
    torch.manual_seed(0)
    keep, keep_prob = keep_mask((4096, 64), p, torch.device("cpu"))
    assert keep.dtype == torch.bool and keep.shape == (4096, 64)
    assert keep_prob == pytest.approx(1 - p, abs=1 / 65536)
    for lane in range(4):  # the four 16-bit lanes of each 64-bit draw are each uniform
        rate = 1 - keep.flatten()[lane::4].float().mean().item()
        assert rate == pytest.approx(p, abs=4 * (p * (1 - p) / keep.numel() * 4) ** 0.5 + 1e-4)


def test_rates_are_honoured_to_one_part_in_65536():
    assert lane_threshold(0.0) == 0 and lane_threshold(1 / 65536) == 1 and lane_threshold(0.5) == 32768


def test_training_output_is_zero_or_scaled_and_unbiased_and_the_gradient_follows_the_mask():
    torch.manual_seed(1)
    x = torch.randn(256, 512, requires_grad=True)
    y = dropout(x, 0.2, training=True)
    kept = y != 0
    scale = 1 / keep_mask((1,), 0.2, x.device)[1]
    torch.testing.assert_close(y[kept], x[kept] * scale)
    assert abs(1 - kept.float().mean().item() - 0.2) < 0.01
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() * scale)
    ones = torch.ones(400_000)
    assert dropout(ones, 0.3, training=True).mean().item() == pytest.approx(1.0, abs=0.01)


def test_evaluation_and_rate_zero_are_the_identity_and_rate_one_drops_all():
    x = torch.randn(8, 8)
    assert dropout(x, 0.5, training=False) is x and dropout(x, 0.0, training=True) is x
    assert torch.count_nonzero(dropout(x, 1.0, training=True)) == 0


def test_the_module_is_an_nn_dropout_that_prints_the_same_and_reproduces_under_a_seed():
    m = Dropout(0.1)
    assert isinstance(m, nn.Dropout) and repr(m) == repr(nn.Dropout(0.1))
    x = torch.randn(64, 64)
    torch.manual_seed(3)
    a = m(x)
    torch.manual_seed(3)
    torch.testing.assert_close(m(x), a)
    assert torch.equal(m.eval()(x), x)


def test_attention_with_dropout_zero_probability_tends_to_sdpa():
    """The CPU training path is SDPA's math: with a vanishing rate it equals SDPA, causal or with a mask."""
    torch.manual_seed(4)
    q, k, v = (torch.randn(2, 3, 6, 8) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(attend_with_dropout(q, k, v, None, True, 1e-9), expected)
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    torch.testing.assert_close(attend_with_dropout(q, k, v, mask, False, 1e-9), attend(q, k, v, mask, False))


def test_dropped_attention_weights_are_rescaled_rows_of_the_causal_softmax():
    torch.manual_seed(5)
    q, k = torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4)
    v = torch.eye(5).view(1, 1, 5, 5)  # the output is the (dropped-out) weights themselves
    w = attend_with_dropout(q, k, v, None, True, 0.4)[0, 0]
    full = F.softmax((q @ k.transpose(-2, -1))[0, 0] / 2 + torch.full((5, 5), float("-inf")).triu(1), dim=-1)
    kept = w != 0
    assert not kept.triu(1).any()  # never attends to the future
    torch.testing.assert_close(w[kept], full[kept] / keep_mask((1,), 0.4, q.device)[1])


def test_a_model_with_dropout_learns_and_is_deterministic_in_evaluation():
    torch.manual_seed(6)
    m = AttentionLanguageModel(
        vocab_size=11, context_length=8, embedding_size=16, head_size=16, num_heads=2, num_blocks=1, dropout=0.2
    )
    x = torch.randint(0, 11, (4, 8))
    train_a, train_b = m(x)[0], m(x)[0]
    assert not torch.equal(train_a, train_b)  # masks differ from call to call
    m.eval()
    torch.testing.assert_close(m(x)[0], m(x)[0])


def test_the_dropout_benchmark_prints_its_three_sides_and_restores_our_masks(capsys):
    import json

    import model.attention_kernels
    import model.dropout
    from benchmarks import dropout_speed

    ours = model.dropout.dropout
    dropout_speed.main(
        [
            "--model",
            "lecture",
            "--batch",
            "2",
            "--rounds",
            "1",
            "--steps",
            "1",
            "--vocab-size",
            "50",
            "--dtype",
            "float32",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert {
        "train_tokens_per_sec_none",
        "train_tokens_per_sec_torch_masks",
        "train_tokens_per_sec_ours",
        "ours_over_torch_masks",
        "ours_over_none",
    } <= set(out)
    assert model.dropout.dropout is ours and model.attention_kernels.masked_dropout is ours
