import math

import pytest
import torch
import torch.nn.functional as F

from model import Head, MultiHeadAttention
from model.counts import num_parameters
from model.sampling import sample_from
from model.streaming import new_cache, stream, window_start
from tests.helpers import assert_bf16_cached_matches_uncached, draw, tiny_model

V = 50


@pytest.mark.parametrize("attention", ["heads", "fused"])
def test_causality_changing_token_t_never_changes_earlier_outputs(attention):
    m = tiny_model(attention)
    idx = torch.randint(0, V, (2, 16))
    base, _ = m(idx)
    for t in (0, 5, 15):
        changed = idx.clone()
        changed[:, t] = (changed[:, t] + 1) % V
        out, _ = m(changed)
        assert torch.allclose(out[:, :t], base[:, :t], atol=1e-6)
        assert not torch.allclose(out[:, t], base[:, t])


def test_head_matches_hand_computation():
    torch.manual_seed(0)
    head = Head(embedding_size=8, head_dim=4, context_length=5)
    x = torch.randn(1, 5, 8)
    with torch.no_grad():
        got = head(x)
        q, k, v = x @ head.query.weight.T, x @ head.key.weight.T, x @ head.value.weight.T
        expected = torch.zeros(1, 5, 4)
        for i in range(5):
            scores = torch.tensor([float(q[0, i] @ k[0, j]) / math.sqrt(4) for j in range(i + 1)])
            w = torch.softmax(scores, dim=0)
            expected[0, i] = sum(w[j] * v[0, j] for j in range(i + 1))
    assert torch.allclose(got, expected, atol=1e-6)


def test_heads_and_fused_give_same_outputs_and_gradients():
    torch.manual_seed(0)
    heads = MultiHeadAttention(32, 32, 4, 16, attention="heads")
    fused = MultiHeadAttention(32, 32, 4, 16, attention="fused")
    fused.load_state_dict(heads.state_dict())  # the heads' matrices load into the fused path's one tensor
    x = torch.randn(3, 16, 32)
    y1, y2 = heads(x), fused(x)
    assert torch.allclose(y1, y2, atol=1e-5)
    y1.square().sum().backward()
    y2.square().sum().backward()
    for h, head in enumerate(heads.heads):  # qkv[0, h] is head h's query, [1, h] its key, [2, h] its value
        for i, part in enumerate((head.query, head.key, head.value)):
            assert torch.allclose(part.weight.grad, fused.qkv.grad[i, h], atol=1e-5), (h, i)
    for name in ("proj.weight", "proj.bias"):
        assert torch.allclose(heads.get_parameter(name).grad, fused.get_parameter(name).grad, atol=1e-5), name


def test_whole_model_heads_vs_fused_and_state_dict_compatibility():
    a, b = tiny_model("heads"), tiny_model("fused")
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, V, (2, 16))
    assert torch.allclose(a(idx)[0], b(idx)[0], atol=1e-5)
    a.load_state_dict(b.state_dict())  # and back: the fused tensor loads into the heads
    assert torch.allclose(a(idx)[0], b(idx)[0], atol=1e-5)
    assert "blocks.0.attn.qkv" in b.state_dict() and "blocks.0.attn.heads.0.query.weight" in a.state_dict()


@pytest.mark.parametrize("init", ["gpt2", "torch"])
def test_same_seed_draws_the_same_weights_on_either_path(init):
    from model.qkv_layout import to_fused

    models = [tiny_model(attention, seed=3, init=init) for attention in ("heads", "fused")]
    heads, fused = to_fused(models[0].state_dict()), models[1].state_dict()
    assert list(heads) == list(fused)  # the fused tensor stands where the heads stood
    for key in fused:
        assert torch.equal(heads[key], fused[key]), key


def test_multihead_concat_width_is_head_size():
    mha = MultiHeadAttention(embedding_size=24, head_size=12, num_heads=3, context_length=8, attention="heads")
    assert [h.query.out_features for h in mha.heads] == [4, 4, 4]
    assert mha.proj.in_features == 12 and mha.proj.out_features == 24
    fused = MultiHeadAttention(embedding_size=24, head_size=12, num_heads=3, context_length=8)
    assert fused.qkv.shape == (3, 3, 4, 24) and fused.qkv_weight().shape == (36, 24)
    assert not hasattr(fused, "heads")  # one tensor, nothing to concatenate in a step


def test_loss_at_init_is_close_to_log_vocab():
    m = tiny_model(vocab_size=500)
    idx = torch.randint(0, 500, (8, 16))
    _, loss = m(idx, idx)
    assert abs(loss.item() - math.log(500)) < 0.1


@pytest.mark.parametrize("attention", ["heads", "fused"])
def test_tiny_model_overfits_one_batch(attention):
    m = tiny_model(attention).train()
    torch.manual_seed(1)
    x = torch.randint(0, V, (4, 16))
    y = torch.roll(x, -1, dims=1)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    for _ in range(200):
        _, loss = m(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05


def test_invalid_sizes_are_rejected():
    with pytest.raises(ValueError, match="divisible"):
        tiny_model(head_size=30, num_heads=4)
    with pytest.raises(ValueError, match="dropout"):
        tiny_model(dropout=1.0)
    with pytest.raises(ValueError, match="context_length"):
        tiny_model(context_length=0)


def _stream_logits(m, idx, n, use_cache, **kw):
    return [logits for _, logits in stream(m, idx, n, temperature=0, use_cache=use_cache, **kw)]


@pytest.mark.parametrize("attention", ["heads", "fused"])
@pytest.mark.parametrize("batch", [1, 3])
def test_cached_generation_gives_the_same_logits_at_every_step(attention, batch):
    m = tiny_model(attention)
    idx = torch.randint(0, V, (batch, 5))
    n = 40  # runs well past context_length=16: the window moves and the cache is refilled
    cached, plain = _stream_logits(m, idx, n, True), _stream_logits(m, idx, n, False)
    assert len(cached) == len(plain) == n
    for step, (a, b) in enumerate(zip(cached, plain, strict=True)):
        assert torch.allclose(a, b, atol=1e-5), f"step {step}"


@pytest.mark.parametrize("shift", [1, 3, 16])
def test_cached_equals_uncached_for_every_window_shift(shift):
    m = tiny_model()
    idx = torch.randint(0, V, (2, 20))  # prompt longer than the context
    a = _stream_logits(m, idx, 30, True, window_shift=shift)
    b = _stream_logits(m, idx, 30, False, window_shift=shift)
    assert all(torch.allclose(x, y, atol=1e-5) for x, y in zip(a, b, strict=True))


def test_uncached_logits_match_a_full_forward_of_the_window():
    m = tiny_model()
    idx = torch.randint(0, V, (1, 10))
    first = _stream_logits(m, idx, 1, False)[0]
    assert torch.allclose(first, m(idx)[0][:, -1], atol=1e-6)
    long = torch.randint(0, V, (1, 40))
    s = window_start(m, 40, shift=4)
    assert 40 - s <= 16
    assert torch.allclose(_stream_logits(m, long, 1, True, window_shift=4)[0], m(long[:, s:])[0][:, -1], atol=1e-5)


def test_long_prompt_is_cropped_to_the_context():
    m = tiny_model()
    out = m.generate(torch.randint(0, V, (2, 50)), 5, temperature=0)
    assert out.shape == (2, 55)


def test_sampling_is_reproducible_and_greedy_is_argmax():
    m = tiny_model()
    idx = torch.randint(0, V, (1, 4))
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    assert torch.equal(m.generate(idx, 20, generator=g1), m.generate(idx, 20, generator=g2))
    logits = torch.randn(4, V)
    assert torch.equal(draw(logits, temperature=0), logits.argmax(-1, keepdim=True))


def test_top_k_and_top_p_only_sample_allowed_tokens():
    logits = torch.tensor([[5.0, 4.0, 1.0, 0.0, -1.0]]).repeat(200, 1)
    g = torch.Generator().manual_seed(0)
    assert set(draw(logits, 1.0, top_k=2, generator=g).flatten().tolist()) <= {0, 1}
    probs = torch.softmax(logits[0], 0)  # p0 ~ 0.70, p0 + p1 ~ 0.96
    assert probs[0] < 0.9 < probs[:2].sum()
    assert set(draw(logits, 1.0, top_p=0.9, generator=g).flatten().tolist()) <= {0, 1}
    assert set(draw(logits, 1.0, top_p=0.5, generator=g).flatten().tolist()) == {0}


def test_bad_sampling_arguments_raise():
    m = tiny_model()
    idx = torch.zeros(1, 1, dtype=torch.long)
    for kw in (dict(max_new_tokens=-1), dict(max_new_tokens=1, top_p=0.0), dict(max_new_tokens=1, top_k=0)):
        with pytest.raises(ValueError):
            m.generate(idx, **kw)


def test_weight_tying_shares_the_matrix():
    m = tiny_model(tie_weights=True)
    assert m.lm_head.weight is m.token_embedding.weight
    untied = tiny_model()
    assert num_parameters(m) == num_parameters(untied) - V * 32


def test_residual_projections_use_scaled_init():
    m = tiny_model(num_blocks=8, embedding_size=64, head_size=64)
    std_proj = m.blocks[0].attn.proj.weight.std().item()
    std_fc = m.blocks[0].ffwd.fc.weight.std().item()
    assert abs(std_fc - 0.02) < 0.003
    assert abs(std_proj - 0.02 / math.sqrt(16)) < 0.002


def test_kv_cache_prefill_then_step_matches_full_forward():
    m = tiny_model()
    idx = torch.randint(0, V, (2, 12))
    full, _ = m(idx)
    cache = new_cache(m, 2, torch.device("cpu"))
    a, _ = m(idx[:, :8], kv_cache=cache, start=0)
    b, _ = m(idx[:, 8:], kv_cache=cache, start=8)  # several new tokens at once use the offset mask
    assert torch.allclose(torch.cat([a, b], 1), full, atol=1e-5)
    assert torch.allclose(F.softmax(b, -1), F.softmax(full[:, 8:], -1), atol=1e-6)


def test_sampling_follows_the_probabilities():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0]]).repeat(40_000, 1)
    g = torch.Generator().manual_seed(0)
    ids = sample_from(probs, g).flatten()
    freq = torch.bincount(ids, minlength=5).float() / len(ids)
    assert freq[1] == 0 and freq[4] == 0
    assert torch.allclose(freq, probs[0], atol=0.01)
    # unnormalised rows are fine: drawn in proportion
    assert torch.equal(sample_from(torch.tensor([[0.0, 2.0, 0.0]]), g), torch.tensor([[1]]))


def test_sampling_never_picks_a_zero_probability_tail_even_when_u_rounds_up(monkeypatch):
    # u = rand * total can round to total itself; searchsorted would then point past the last real token.
    monkeypatch.setattr(torch, "rand", lambda shape, **kw: torch.ones(shape, dtype=kw.get("dtype")))
    probs = torch.tensor([[0.25, 0.75, 0.0, 0.0], [0.1, 0.2, 0.3, 0.4]])
    assert sample_from(probs).flatten().tolist() == [1, 3]


def test_cached_generation_under_cpu_bf16_autocast_matches_uncached():
    m = tiny_model()
    idx = torch.randint(0, V, (2, 5))
    assert_bf16_cached_matches_uncached(m, idx, 30, "cpu")


def test_decode_step_leaves_the_thread_count_as_it_was():
    m = tiny_model()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        m.generate(torch.zeros(1, 1, dtype=torch.long), 5)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
