"""The modern options (rotary positions, RMSNorm, relu2 / SwiGLU, query/key norm, zero-init, init): each keeps
attention causal and exact across the `heads` and `fused` paths and the KV cache, and the defaults stay the
lecture model."""

import pytest
import torch
import torch.nn.functional as F

from model.counts import num_parameters
from model.streaming import stream
from tests.helpers import assert_bf16_cached_matches_uncached, tiny_model

V = 50


def _stream_logits(m, idx, n, use_cache, **kw):
    return [logits for _, logits in stream(m, idx, n, temperature=0, use_cache=use_cache, **kw)]


# -- the modern options: rotary positions, RMSNorm, relu2 / SwiGLU, query/key norm, zero-init, init -------------
MODERN = dict(position="rope", norm="rmsnorm", mlp="relu2", qk_norm=True, zero_init_proj=False, init="torch")
# the data-limited levers (model.attention_gate, value_embedding, unet_skips, logit_softcap), alone and on MODERN
LEVERS = [
    dict(attention_gate=True),
    dict(value_embedding=True),
    dict(unet_skips=True),
    dict(logit_softcap=2.0),
    dict(MODERN, attention_gate=True, value_embedding=True, unet_skips=True, logit_softcap=2.0),
]
OPTIONS = [
    dict(position="rope"),
    dict(norm="rmsnorm"),
    dict(mlp="relu2"),
    dict(mlp="swiglu"),
    dict(qk_norm=True),
    dict(init="torch"),
    dict(position="rope", qk_norm=True, mlp="swiglu", norm="rmsnorm"),
    MODERN,
    *LEVERS,
]


def _option_id(o):
    return ",".join(f"{k}={v}" for k, v in o.items())


def _scramble(m, seed=1):
    """Random weights everywhere (zero-initialised projections would hide a wrong attention path)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p.dim() == 1 else 0.0))
    return m


def test_rope_scores_depend_only_on_relative_position():
    from model.rope import apply_rope, rope_tables

    torch.manual_seed(0)
    cos, sin = rope_tables(8, 64)
    q, k = torch.randn(2, 3, 10, 8), torch.randn(2, 3, 10, 8)
    pos = torch.arange(10)

    def weights(p):
        return F.softmax(apply_rope(q, cos, sin, p) @ apply_rope(k, cos, sin, p).transpose(-2, -1), dim=-1)

    base = weights(pos)
    for shift in (1, 7, 54):
        assert torch.allclose(weights(pos + shift), base, atol=1e-5), shift
    assert not torch.allclose(weights(pos.flip(0)), base, atol=1e-3)  # positions do matter
    assert not torch.allclose(base, F.softmax(q @ k.transpose(-2, -1), dim=-1), atol=1e-3)  # it rotates


def test_rope_model_attention_weights_are_shift_invariant():
    from model.attention_maps import attention_maps

    m = _scramble(tiny_model(position="rope", qk_norm=True))
    attn = m.blocks[0].attn
    h = torch.randn(1, 6, 32)
    q, k = h @ attn.qkv[0, 0].T, h @ attn.qkv[1, 0].T  # head 0's query and key
    from model.attention import shape_qk

    def weights(start):
        pos = torch.arange(start, start + 6)
        qq, kk = shape_qk(q, k, attn.rope, pos, True)
        return F.softmax(qq @ kk.transpose(-2, -1), dim=-1)

    assert torch.allclose(weights(0), weights(9), atol=1e-5)
    assert attention_maps(m, torch.randint(0, V, (8,))).shape == (2, 4, 8, 8)


@pytest.mark.parametrize("options", OPTIONS, ids=_option_id)
def test_heads_and_fused_agree_under_every_option(options):
    a = _scramble(tiny_model("heads", **options))
    b = tiny_model("fused", **options)
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, V, (2, 16))
    ya, _ = a(idx)
    yb, _ = b(idx)
    assert torch.allclose(ya, yb, atol=1e-4)


@pytest.mark.parametrize("attention", ["heads", "fused"])
@pytest.mark.parametrize("options", OPTIONS, ids=_option_id)
def test_cached_equals_uncached_under_every_option(options, attention):
    m = _scramble(tiny_model(attention, **options))
    idx = torch.randint(0, V, (2, 5))
    # window_shift=4: the refill scheme, exact for every option (rope's default sliding cache is checked
    # against its own reference in test_generation.py)
    cached, plain = _stream_logits(m, idx, 30, True, window_shift=4), _stream_logits(m, idx, 30, False, window_shift=4)
    for step, (x, y) in enumerate(zip(cached, plain, strict=True)):
        assert torch.allclose(x, y, atol=1e-4), f"step {step}"


def test_modern_cached_generation_under_cpu_bf16_autocast_matches_uncached():
    m = tiny_model(**MODERN)
    assert_bf16_cached_matches_uncached(m, torch.randint(0, V, (2, 5)), 30, "cpu")


def test_rmsnorm_matches_its_definition():
    m = _scramble(tiny_model(norm="rmsnorm"))
    norm = m.blocks[0].ln1
    assert isinstance(norm, torch.nn.RMSNorm) and isinstance(m.ln_f, torch.nn.RMSNorm)
    x = torch.randn(3, 5, 32) * 4 + 1
    eps = torch.finfo(torch.float32).eps
    expected = x / torch.sqrt(x.square().mean(-1, keepdim=True) + eps) * norm.weight
    assert torch.allclose(norm(x), expected, atol=1e-5)
    assert not hasattr(norm, "bias") or norm.bias is None


def test_attention_maps_under_rope_and_qk_norm_are_the_weights_the_heads_use():
    from model.attention_maps import attention_maps

    m = _scramble(tiny_model("heads", position="rope", qk_norm=True))
    idx = torch.randint(0, V, (1, 10))
    maps, x = attention_maps(m, idx), m.embed(idx)
    for b, block in enumerate(m.blocks):
        h = block.ln1(x)
        for i, head in enumerate(block.attn.heads):
            assert torch.allclose(maps[b, i] @ head.value(h)[0], head(h, block.attn.rope)[0], atol=1e-4)
        x = block(x)


def test_default_options_are_the_lecture_model():
    m = tiny_model()
    names = set(m.state_dict())
    assert "position_embedding.weight" in names and "ln_f.bias" in names
    assert isinstance(m.blocks[0].ln1, torch.nn.LayerNorm) and m.blocks[0].ffwd.fc.out_features == 4 * 32
    assert m.blocks[0].attn.rope is None
    rope = tiny_model(position="rope")
    assert "position_embedding.weight" not in set(rope.state_dict())
    assert num_parameters(rope) == num_parameters(m) - 16 * 32


def test_swiglu_keeps_the_parameter_count_close_to_the_gelu_mlp():
    for width in (64, 128, 384):
        kw = dict(embedding_size=width, head_size=width)
        gelu = tiny_model(**kw).blocks[0].ffwd
        swiglu = tiny_model(mlp="swiglu", **kw).blocks[0].ffwd
        n = [sum(p.numel() for p in f.parameters()) for f in (gelu, swiglu)]
        assert abs(n[1] - n[0]) / n[0] < 0.03, (width, n)


def test_zero_init_proj_and_torch_init():
    m = tiny_model(zero_init_proj=True)
    for block in m.blocks:
        assert block.attn.proj.weight.abs().sum() == 0 and block.ffwd.proj.weight.abs().sum() == 0
    assert m.blocks[0].ffwd.fc.weight.abs().sum() > 0
    torch_init = tiny_model(init="torch")
    assert abs(torch_init.token_embedding.weight.std().item() - 1.0) < 0.1  # nn.Embedding's N(0, 1)
    assert abs(tiny_model().token_embedding.weight.std().item() - 0.02) < 0.005


def test_bad_option_values_are_one_config_error():
    from common.errors import ConfigError
    from model.config import ModelConfig

    for bad in (
        dict(position="alibi"),
        dict(norm="batch"),
        dict(mlp="tanh"),
        dict(qk_norm="yes"),
        dict(zero_init_proj=1),
        dict(init="xavier"),
        dict(position="rope", head_size=12, num_heads=4),
    ):
        with pytest.raises(ConfigError):
            ModelConfig(**bad)


def test_old_model_config_dict_loads_as_the_lecture_model():
    from model.config import ModelConfig

    old = dict(
        vocab_size=50,
        context_length=16,
        embedding_size=32,
        head_size=32,
        num_heads=4,
        num_blocks=2,
        dropout=0.0,
        attention="fused",
        tie_weights=False,
    )
    c = ModelConfig.from_dict(old)
    assert (c.position, c.norm, c.mlp, c.qk_norm, c.zero_init_proj, c.init) == (
        "learned",
        "layernorm",
        "gelu",
        False,
        False,
        "gpt2",
    )


# -- the levers' definitions --------------------------------------------------------------------------------
def test_every_gate_starts_at_zero_and_the_levers_start_as_their_definitions_say():
    m = tiny_model(attention_gate=True, value_embedding=True, unet_skips=True, num_blocks=4)
    for i, block in enumerate(m.blocks):
        assert block.attn.gate.weight.eq(0).all()  # sigmoid(0): each head's output halved at the start
        assert (block.attn.value_gate is not None) == (i in (1, 3))  # every other block, ending with the last
        if block.attn.value_gate is not None:
            assert block.attn.value_gate.weight.eq(0).all()  # 2 sigmoid(0) = 1: the embedding's values come in whole
    assert m.skip_weights.tolist() == [1.0, 1.0]


def test_the_soft_cap_bounds_the_logits_and_keeps_small_ones():
    a, b = tiny_model(), tiny_model(logit_softcap=5.0)
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        a.lm_head.weight.mul_(100)
        b.lm_head.weight.mul_(100)
    idx = torch.randint(0, V, (2, 16))
    raw, capped = a(idx)[0], b(idx)[0]
    assert raw.abs().max() > 5 and capped.abs().max() < 5
    torch.testing.assert_close(capped, 5 * torch.tanh(raw / 5))


def test_unet_skips_feed_the_first_half_to_the_second_in_reverse():
    m = _scramble(tiny_model(unet_skips=True, num_blocks=4))
    idx = torch.randint(0, V, (1, 8))
    with torch.no_grad():
        x = m.embed(idx)
        outs = []
        for i, block in enumerate(m.blocks):
            if i == 2:
                x = x + m.skip_weights[0] * outs[1]
            if i == 3:
                x = x + m.skip_weights[1] * outs[0]
            x = block(x)
            outs.append(x)
        torch.testing.assert_close(m.lm_head(m.ln_f(x)), m(idx)[0])


def test_a_lever_export_cannot_express_in_a_stock_class_goes_to_the_custom_layout():
    from hf_export.writer import choose_layout
    from model.config import ModelConfig

    assert choose_layout(ModelConfig(vocab_size=V)) == "gpt2"
    for lever in (
        dict(attention_gate=True),
        dict(value_embedding=True),
        dict(unet_skips=True),
        dict(logit_softcap=15.0),
    ):
        assert choose_layout(ModelConfig(vocab_size=V, **lever)) == "custom"


@pytest.mark.parametrize(
    "settings,needle",
    [
        (dict(logit_softcap=-1.0), "model.logit_softcap=-1.0 is invalid"),
        (dict(unet_skips=True, num_blocks=1), "needs model.num_blocks >= 2"),
    ],
)
def test_lever_settings_that_cannot_work_are_refused(settings, needle):
    with pytest.raises(ValueError, match=needle):
        tiny_model(**settings)


@pytest.mark.parametrize("levers", [dict(unet_skips=True, value_embedding=True, attention_gate=True, num_blocks=4)])
def test_attention_maps_read_each_block_as_the_model_feeds_it(levers):
    from model.attention_maps import attention_maps

    m = _scramble(tiny_model("heads", **levers))
    idx = torch.randint(0, V, (1, 10))
    maps = attention_maps(m, idx)
    with torch.no_grad():
        x = x0 = m.embed(idx)
        outs = []
        for i, block in enumerate(m.blocks):
            if i >= 2:
                x = x + m.skip_weights[i - 2] * outs[3 - i]
            h = block.ln1(x)
            q, k = block.attn.heads[0].query(h), block.attn.heads[0].key(h)
            expected = F.softmax(
                (q @ k.transpose(-2, -1) * block.attn.heads[0].scale).masked_fill(
                    ~torch.ones(10, 10, dtype=torch.bool).tril(), float("-inf")
                ),
                dim=-1,
            )[0]
            torch.testing.assert_close(maps[i, 0], expected)
            x = block(x, None, 0, x0)
            outs.append(x)
