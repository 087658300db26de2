"""Generation: the sliding KV cache of rotary models, the learned-position refill scheme, batched samples,
bounded memory, and bench.py's generation report."""

from __future__ import annotations

import io
import itertools
import json

import pytest
import torch
import torch.nn.functional as F

from inference.config import GenerateConfig
from inference.generation import stream_samples
from model import AttentionLanguageModel, streaming
from model.attention import shape_qk
from model.rope import rope_tables
from model.streaming import stream
from tests.helpers import cli, draw, tiny_model

V, C = 50, 16  # tiny_model's vocabulary and context
MODERN = dict(position="rope", norm="rmsnorm", mlp="relu2", qk_norm=True, init="torch")
ROPE_OPTIONS = [dict(position="rope"), dict(position="rope", qk_norm=True, mlp="swiglu", norm="rmsnorm"), MODERN]


def _scrambled(attention="fused", **options):
    """Random weights everywhere, so no path can hide behind zero or identity initialisation."""
    m = tiny_model(attention, **options)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if p.dim() == 1 else 0.0))
    return m


@torch.inference_mode()
def banded_logits(m: AttentionLanguageModel, seq: torch.Tensor) -> torch.Tensor:
    """The uncached reference of the sliding cache: one forward over the whole sequence (B, N) in which every
    position, in every block, attends to itself and the context_length - 1 positions before it, rotated at
    positions 0..N-1 -> logits (B, N, V). Written from the modules' parameters, independently of stream()."""
    B, N = seq.shape
    i = torch.arange(N)
    band = (i[None] <= i[:, None]) & (i[None] > i[:, None] - m.context_length)  # (N, N)
    x = m.token_embedding(seq)
    for block in m.blocks:
        a = block.attn
        qkv = F.linear(block.ln1(x), a.qkv_weight()).view(B, N, 3, a.num_heads, a.head_dim).permute(2, 0, 3, 1, 4)
        q, k = shape_qk(qkv[0], qkv[1], rope_tables(a.head_dim, N), i, a.qk_norm)
        y = F.scaled_dot_product_attention(q, k, qkv[2], attn_mask=band)  # (B, H, N, D)
        x = x + a.proj(y.transpose(1, 2).reshape(B, N, a.head_size))
        x = x + block.ffwd(block.ln2(x))
    return m.lm_head(m.ln_f(x))


def _stream(m, idx, n, use_cache=True, **kw):
    """(every id of the sequence (B, T + n), the logits of each step [(B, V)])."""
    steps = list(stream(m, idx, n, temperature=0, use_cache=use_cache, **kw))
    return torch.cat([idx, *[t for t, _ in steps]], 1), [lg for _, lg in steps]


@pytest.mark.parametrize("attention", ["heads", "fused"])
@pytest.mark.parametrize("options", ROPE_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_sliding_cache_matches_the_banded_reference_far_beyond_the_context(options, attention):
    m = _scrambled(attention, **options)
    idx = torch.randint(0, V, (2, 5))
    seq, logits = _stream(m, idx, 5 * C)
    ref = banded_logits(m, seq)
    for step, got in enumerate(logits):
        want = ref[:, idx.shape[1] + step - 1]
        assert (got - want).norm() / want.norm() < 1e-5, f"step {step}"


def test_a_prompt_longer_than_the_context_keeps_its_last_context_length_tokens():
    m = _scrambled(**MODERN)
    idx = torch.randint(0, V, (1, 3 * C))
    seq, logits = _stream(m, idx, 2 * C)
    ref = banded_logits(m, seq[:, 2 * C :])  # the cache starts at the prompt's last C tokens
    for step, got in enumerate(logits):
        assert torch.allclose(got, ref[:, C + step - 1], atol=1e-4, rtol=1e-5), f"step {step}"


@pytest.mark.parametrize("options", ROPE_OPTIONS[1:])
def test_with_one_block_sliding_equals_crop_and_recompute(options):
    # One block: a cached key depends only on its token and position, so the ring is exactly the classic
    # crop-to-the-last-context_length-tokens loop (the uncached path with the default shift of 1).
    m = _scrambled(num_blocks=1, **options)
    idx = torch.randint(0, V, (2, 3))
    _, cached = _stream(m, idx, 4 * C)
    _, plain = _stream(m, idx, 4 * C, use_cache=False)
    for step, (a, b) in enumerate(zip(cached, plain, strict=True)):
        assert (a - b).norm() / b.norm() < 1e-5, f"step {step}"


def test_sliding_cache_under_bf16_autocast_stays_within_two_percent_of_the_reference():
    m = _scrambled(**MODERN)
    idx = torch.randint(0, V, (2, 5))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        seq, logits = _stream(m, idx, 4 * C)
    ref = banded_logits(m, seq)  # float32
    for step, got in enumerate(logits):
        want = ref[:, idx.shape[1] + step - 1]
        assert (got - want).norm() / want.norm() < 2e-2, f"step {step}"


def test_the_ring_buffers_are_written_in_place(monkeypatch):
    caches = []
    new_cache = streaming.new_cache
    monkeypatch.setattr(streaming, "new_cache", lambda *a: caches.append(new_cache(*a)) or caches[-1])
    m = _scrambled(**MODERN)
    pointers = set()
    for _ in stream(m, torch.randint(0, V, (1, 2)), 5 * C, temperature=1.0):
        pointers.add(tuple(b.data_ptr() for b in caches[0].buffers))
    assert len(caches) == 1 and len(pointers) == 1
    assert caches[0].position == 2 + 5 * C - 1  # slid, never refilled: every position of the ring written


def test_rope_position_counter_reaches_any_position():
    m = _scrambled(**MODERN)
    from model.decode import DecodeStep

    cache = streaming.new_cache(m, 1, torch.device("cpu"))
    for b in cache.buffers:  # at such a position every slot holds a key: here zeros, not torch.empty's leftovers
        b.zero_()
    step = DecodeStep(m, cache)
    for p in (10**9, 10**9 + 63, 10**9 + 64):  # inside one block of rotations, and the next
        cache.position = p
        assert torch.isfinite(step(torch.zeros(1, 1, dtype=torch.long), cache)).all()


@pytest.mark.parametrize("options", [{}, MODERN])
def test_huge_max_new_tokens_neither_allocates_nor_fails(options):
    m = tiny_model(**options)
    tokens = list(itertools.islice(stream(m, torch.zeros(2, 1, dtype=torch.long), 10**11), 3 * C))
    assert len(tokens) == 3 * C and tokens[-1][0].shape == (2, 1)


def test_learned_positions_sample_as_the_refill_scheme_always_did():
    # The reference is the uncached loop over the same windows, sampled from the same generator: the text a
    # seed gave before batching and the ring, token for token.
    m = _scrambled()
    idx = torch.randint(0, V, (1, 3))
    got = m.generate(idx, 4 * C, temperature=1.0, generator=torch.Generator().manual_seed(3))
    seq, g = idx, torch.Generator().manual_seed(3)
    with torch.inference_mode():
        while seq.shape[1] < got.shape[1]:
            s = streaming.window_start(m, seq.shape[1], streaming.default_window_shift(m))
            logits = m(seq[:, s:], last_only=True)[0][:, -1]
            seq = torch.cat([seq, draw(logits, 1.0, None, None, g)], 1)
    assert torch.equal(got, seq)


class _Chars:
    """A tokenizer over the letters a..z (enough for stream_samples)."""

    def unknown_chars(self, text):
        return []

    def encode(self, text):
        import numpy as np

        return np.array([ord(c) - 97 for c in text], dtype=np.int64)

    def stream_decoder(self):
        class Decoder:
            def feed(self, i):
                return chr(97 + i % 26)

            def flush(self):
                return ""

        return Decoder()


def test_num_samples_run_as_one_batch_and_one_sample_keeps_its_text(monkeypatch):
    m = tiny_model(vocab_size=26)
    calls = []
    import inference.generation

    monkeypatch.setattr(
        inference.generation,
        "stream",
        lambda model, idx, *a, **kw: calls.append(idx.shape) or stream(model, idx, *a, **kw),
    )
    cpu = torch.device("cpu")
    out = io.StringIO()

    def settings(**kw) -> GenerateConfig:  # generate.py prompt=abc max_new_tokens=20 seed=7 ...
        return GenerateConfig(prompt="abc", max_new_tokens=20, seed=7, **kw)

    texts = stream_samples(m, _Chars(), settings(num_samples=4, temperature=1.0), cpu, out=out)
    assert calls == [(4, 3)] and len(texts) == 4 and len(set(texts)) > 1
    assert out.getvalue() == ("\n" + "\n" + "-" * 40 + "\n").join(texts) + "\n"  # as sample after sample
    one = stream_samples(m, _Chars(), settings(temperature=1.0), cpu, out=io.StringIO())[0]
    ids = stream(m, torch.tensor([[0, 1, 2]]), 20, 1.0, None, None, True, torch.Generator().manual_seed(7))
    assert one == "abc" + "".join(chr(97 + int(t)) for t, _ in ids)
    greedy = stream_samples(m, _Chars(), settings(num_samples=3, temperature=0.0), cpu, out=io.StringIO())
    assert greedy == [stream_samples(m, _Chars(), settings(temperature=0.0), cpu, out=io.StringIO())[0]] * 3


def test_bench_generation_only_reports_both_position_kinds():
    r = cli("bench.py", "--smoke", "--generation-only", "--device", "cpu", env={"OMP_NUM_THREADS": "1"}, timeout=120)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)["generation"]
    for kind in ("learned", "rope"):
        for batch in ("batch_1", "batch_8"):
            side = report[kind][batch]
            assert side["cached_tokens_per_sec"] > 0 and side["crop_tokens_per_sec"] > 0
            assert side["cached_over_crop"] == pytest.approx(
                side["cached_tokens_per_sec"] / side["crop_tokens_per_sec"], rel=0.02
            )
        assert set(report[kind]["per_token_us"]) == {"step", "sampling", "loop"}
