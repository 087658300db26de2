"""The static one-token step (model/static_decode.py) run eagerly on the CPU: DecodeStep's logits and the Sampler's
ids for every model setting, the grammar, and the graph wrapper (model/cuda_graph.py) with its capture faked.
The real capture is tests/test_cuda.py's."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from model import cuda_graph, static_decode
from model.sampling import Sampler, TokenGrammar, sample_from
from model.streaming import stream
from tests.helpers import draw
from tests.model.test_restated_forward import CASES, IDS, settings, shaken

V, C = 60, 8
SETTINGS = [
    (0.0, None, None),
    (0.8, None, None),
    (1.0, None, None),
    (1.3, 5, None),
    (0.7, None, 0.8),
    (0.5, 3, 0.9),
    (1.0, 1, None),
    (2.0, None, 1.0),
    (1e-30, None, None),
]


def small(**options):
    return shaken({**settings("num_blocks", 2), **options})


def generations(model, idx, n, decoder, temperature=0.0, top_k=None, top_p=None, seed=0, **kw):
    """[(ids (B, 1), logits (B, V))] of one generation, and the generator's state after it."""
    g = torch.Generator().manual_seed(seed)
    out = list(stream(model, idx, n, temperature, top_k, top_p, generator=g, decoder=decoder, **kw))
    return out, g.get_state()


def assert_same(a, b, exact_ids=True):
    for step, ((ia, la), (ib, lb)) in enumerate(zip(a, b, strict=True)):
        torch.testing.assert_close(la, lb, rtol=1e-5, atol=1e-5, msg=lambda m, step=step: f"step {step}: {m}")
        if exact_ids:
            assert torch.equal(ia, ib), f"step {step}: ids {ia.tolist()} != {ib.tolist()}"


@pytest.mark.parametrize("name,value", CASES, ids=IDS)
def test_the_static_step_gives_the_decode_steps_logits_past_the_context(name, value):
    model = shaken(settings(name, value))
    prompt = torch.randint(0, model.config.vocab_size, (2, 3), generator=torch.Generator().manual_seed(0))
    n = 3 * model.context_length  # learned positions refill the window; rotary ones slide round the ring
    eager, _ = generations(model, prompt, n, "eager")
    static, _ = generations(model, prompt, n, "static")
    assert_same(static, eager)


@pytest.mark.parametrize("temperature,top_k,top_p", SETTINGS)
def test_the_static_step_samples_the_ids_the_sampler_samples(temperature, top_k, top_p):
    for model in (small(), small(position="rope", qk_norm=True)):
        prompt = torch.randint(0, V, (3, 2), generator=torch.Generator().manual_seed(1))
        eager, state_a = generations(model, prompt, 2 * C, "eager", temperature, top_k, top_p, seed=7)
        static, state_b = generations(model, prompt, 2 * C, "static", temperature, top_k, top_p, seed=7)
        assert_same(static, eager)
        assert torch.equal(state_a, state_b)  # the caller's generator advanced as eager sampling advances it


def reference_draw(logits, temperature, top_k, top_p, generator):
    """The draw as first written, with every setting a host number (torch.topk at k, the nucleus at a float p):
    the ids a seed gave before the settings moved into device tensors."""
    if temperature < torch.finfo(torch.float32).tiny:
        return logits.argmax(dim=-1, keepdim=True)
    if temperature != 1.0:
        logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        logits = logits.masked_fill(logits < torch.topk(logits, top_k, dim=-1).values[:, -1:], float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        drop = (probs.cumsum(dim=-1) - probs) >= top_p
        drop[..., 0] = False
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
    return sample_from(torch.softmax(logits, dim=-1), generator)


@pytest.mark.parametrize("device_k", [False, True], ids=["host-k", "device-k"])
def test_one_sampler_set_again_and_again_draws_the_reference_ids_for_any_values(monkeypatch, device_k):
    logits = torch.randn(4, V, generator=torch.Generator().manual_seed(2)) * 3
    if device_k:  # the sort at a device index that CUDA takes, run on the CPU
        monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda t: True))
    sampler = Sampler(V, torch.device("cpu"))
    for temperature, top_k, top_p in [*SETTINGS, (0.9, V, 0.5), (1.0, V + 5, None), (0.6, 2, 1e-300)]:
        sampler.set(temperature, top_k, top_p, None)
        for seed in range(5):
            ours = sampler(logits, torch.Generator().manual_seed(seed))
            theirs = reference_draw(logits, temperature, top_k, top_p, torch.Generator().manual_seed(seed))
            assert torch.equal(ours, theirs), (temperature, top_k, top_p, seed)
            assert torch.equal(draw(logits, temperature, top_k, top_p, torch.Generator().manual_seed(seed)), theirs)


def spelling_grammar() -> TokenGrammar:
    """A jamo-like grammar over V ids: 1-9 start a character (state 1), 10-19 continue it (state 2), 20-29 end
    it (state 0); the rest are whole characters (state 0)."""
    state = torch.zeros(V, dtype=torch.long)
    state[1:10], state[10:20] = 1, 2
    allowed = torch.zeros(3, V, dtype=torch.bool)
    allowed[0, 1:10] = allowed[0, 30:] = True
    allowed[1, 10:20] = True
    allowed[2, 20:30] = True
    return TokenGrammar(state, allowed)


def test_the_static_step_masks_what_the_grammar_forbids():
    grammar, model = spelling_grammar(), small()
    prompt = torch.tensor([[31], [3]])  # one row between characters, one inside a character
    eager, _ = generations(model, prompt, 3 * C, "eager", 1.0, grammar=grammar, seed=3)
    static, _ = generations(model, prompt, 3 * C, "static", 1.0, grammar=grammar, seed=3)
    assert_same(static, eager)
    previous = prompt[:, -1:]
    for ids, logits in static:
        allowed = grammar.allowed[grammar.state[previous[:, 0]]]
        assert bool(allowed.gather(1, ids).all())
        assert bool(torch.isinf(logits[~allowed]).all())
        previous = ids


def faked(calls: list):
    """A stand-in for capture_cuda_graph: the warm-up runs (which write the buffers), then the step itself."""

    def capture(fn, generator):
        calls.append(generator)
        for _ in range(cuda_graph.WARMUP_RUNS):
            fn()
        return fn

    return capture


def test_the_graph_path_captures_once_per_mode_and_undoes_the_warm_up(monkeypatch, capsys):
    calls: list = []
    monkeypatch.setattr(cuda_graph, "capture_cuda_graph", faked(calls))
    model = small(position="rope")
    prompt = torch.randint(0, V, (2, 3), generator=torch.Generator().manual_seed(4))
    static, _ = generations(model, prompt, 3 * C, "static", 0.8, seed=5)
    graph, _ = generations(model, prompt, 3 * C, "graph", 0.8, seed=5)
    assert_same(graph, static)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("sampling: captured as a CUDA graph in "), err
    again, _ = generations(model, prompt, 3 * C, "graph", 0.8, seed=5)  # the same decoder, its graph kept
    assert_same(again, static)
    generations(model, prompt, C, "graph", 0.8, top_k=4, seed=5)  # another sampling mode: one more capture
    assert len(calls) == 2 and capsys.readouterr().err.count("captured as a CUDA graph") == 1
    assert all(g is not None for g in calls)  # the decoder's own generator is registered with each graph


def test_a_failed_capture_says_so_once_and_samples_eagerly(monkeypatch, capsys):
    def fails(fn, generator):
        fn()  # a warm-up run that wrote the buffers before capture failed
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    monkeypatch.setattr(cuda_graph, "capture_cuda_graph", fails)
    model = small()
    prompt = torch.randint(0, V, (1, 4), generator=torch.Generator().manual_seed(6))
    static, _ = generations(model, prompt, 3 * C, "static", 0.9, seed=8)
    graph, _ = generations(model, prompt, 3 * C, "graph", 0.9, seed=8)
    assert_same(graph, static)
    generations(model, prompt, 3 * C, "graph", 0.9, seed=8)
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "sampling: not captured as a CUDA graph (RuntimeError: operation not permitted when stream is "
        "capturing); running it eagerly"
    ]


def test_the_graph_path_on_a_cpu_falls_back_to_the_eager_static_step(capsys):
    model = small()
    prompt = torch.randint(0, V, (1, 2), generator=torch.Generator().manual_seed(9))
    graph, _ = generations(model, prompt, C, "graph", 0.8)
    static, _ = generations(model, prompt, C, "static", 0.8)
    assert_same(graph, static)
    assert "not on a CUDA device); running it eagerly" in capsys.readouterr().err


def test_interleaved_generations_of_one_model_use_separate_buffers():
    model = small(position="rope")
    prompt = torch.randint(0, V, (1, 3), generator=torch.Generator().manual_seed(10))
    alone_a, _ = generations(model, prompt, 2 * C, "static", 0.8, seed=1)
    alone_b, _ = generations(model, prompt, 2 * C, "static", 0.8, seed=2)
    a = stream(model, prompt, 2 * C, 0.8, generator=torch.Generator().manual_seed(1), decoder="static")
    b = stream(model, prompt, 2 * C, 0.8, generator=torch.Generator().manual_seed(2), decoder="static")
    together = [(next(a), next(b)) for _ in range(2 * C)]
    assert_same([x for x, _ in together], alone_a)
    assert_same([y for _, y in together], alone_b)


def test_a_kept_decoder_samples_the_models_new_weights():
    model = small(norm="rmsnorm")  # folded norm gains: copies that must be gathered again
    prompt = torch.randint(0, V, (2, 2), generator=torch.Generator().manual_seed(11))
    generations(model, prompt, C, "static")
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    eager, _ = generations(model, prompt, 2 * C, "eager")
    static, _ = generations(model, prompt, 2 * C, "static")
    assert_same(static, eager)


def test_decoders_go_with_their_model_and_a_bad_decoder_is_refused():
    model = small()
    generations(model, torch.zeros(1, 1, dtype=torch.long), 2, "static")
    assert model in static_decode._POOLS
    kept, alive = len(static_decode._POOLS), weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None and len(static_decode._POOLS) == kept - 1  # the pool holds no model alive
    with pytest.raises(ValueError, match="decoder must be one of eager, static, graph, compiled, auto, got 'fast'"):
        next(stream(small(), torch.zeros(1, 1, dtype=torch.long), 2, decoder="fast"))


def test_the_gpu_sampling_benchmark_reports_graph_eager_and_same_text(monkeypatch):
    from benchmarks.generation_speed import SIDES, bench_gpu_sampling
    from benchmarks.timing import PRESETS

    monkeypatch.setattr(cuda_graph, "capture_cuda_graph", faked([]))  # the CPU stands in for the card
    monkeypatch.setattr(static_decode.StaticDecode, "compile_forward", lambda self: None)  # the compile: tested below
    tiny = PRESETS["tiny"]
    out = bench_gpu_sampling(tiny, V, torch.device("cpu"), rounds=1, new_tokens=2 * tiny["context_length"])
    assert set(out) == {"config", *SIDES, "graph_over_eager", "same_text", "new_tokens"}
    assert out["same_text"] is True and all(out[k] > 0 for k in SIDES)


def test_a_grammar_of_another_shape_gets_a_graph_of_its_own(monkeypatch):
    calls: list = []
    monkeypatch.setattr(cuda_graph, "capture_cuda_graph", faked(calls))
    model, prompt, three = small(), torch.tensor([[31]]), spelling_grammar()
    four = TokenGrammar(three.state, torch.cat([three.allowed, three.allowed[:1]]))  # one state more, never reached
    for grammar in (three, three, four):
        eager, _ = generations(model, prompt, 2 * C, "eager", 0.9, grammar=grammar, seed=4)
        graph, _ = generations(model, prompt, 2 * C, "graph", 0.9, grammar=grammar, seed=4)
        assert_same(graph, eager)
    assert len(calls) == 2 * 2  # the step's and the refill's graphs read the old grammar's tensors: captured anew


def test_a_kept_decoder_follows_a_replaced_layer(monkeypatch):
    calls: list = []
    monkeypatch.setattr(cuda_graph, "capture_cuda_graph", faked(calls))
    model = small()
    prompt = torch.randint(0, V, (1, 2), generator=torch.Generator().manual_seed(12))
    generations(model, prompt, C, "graph", 0.8)
    model.ln_f = torch.nn.LayerNorm(model.config.embedding_size, bias=False)  # one tensor fewer than before
    with torch.no_grad():
        model.ln_f.weight.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(13))
    eager, _ = generations(model, prompt, 2 * C, "eager", 0.8)
    graph, _ = generations(model, prompt, 2 * C, "graph", 0.8)
    assert_same(graph, eager)
    assert len(calls) == 2 * 2  # the step's and the refill's graphs, before the layer was replaced and after


@pytest.mark.parametrize("options", [{}, dict(position="rope", qk_norm=True)], ids=["learned", "rope"])
def test_the_static_step_under_bf16_autocast_on_the_cpu(options):
    model = small(**options)
    prompt = torch.randint(0, V, (2, 3), generator=torch.Generator().manual_seed(14))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        eager, _ = generations(model, prompt, 3 * C, "eager")
        static, _ = generations(model, prompt, 3 * C, "static")
    for (ia, la), (ib, lb) in zip(static, eager, strict=True):
        assert (la - lb).norm() / lb.norm() < 2e-2
        if not torch.equal(ia, ib):  # a bf16 near-tie picked another token: later inputs differ
            break


@pytest.mark.parametrize("position", ["learned", "rope"])
def test_refills_after_the_first_are_replayed_too_and_sample_the_static_steps_text(monkeypatch, capsys, position):
    """Learned positions refill the window every quarter context after the first fill: each such refill reads as many
    ids, so it is captured once (beside the step) and replayed; rotary positions slide and never refill."""
    calls: list = []
    monkeypatch.setattr(cuda_graph, "capture_cuda_graph", faked(calls))
    model = small(position=position)
    prompt = torch.randint(0, V, (1, 3), generator=torch.Generator().manual_seed(21))
    eager, _ = generations(model, prompt, 4 * C, "eager", 0.8, top_p=0.9, seed=3)
    static, _ = generations(model, prompt, 4 * C, "static", 0.8, top_p=0.9, seed=3)
    graph, _ = generations(model, prompt, 4 * C, "graph", 0.8, top_p=0.9, seed=3)
    assert_same(static, eager) and assert_same(graph, eager)
    assert len(calls) == (2 if position == "learned" else 1)


@pytest.mark.slow
def test_the_compiled_decoder_samples_the_static_steps_text(monkeypatch):
    """inductor's kernels for the static step's forward (here the CPU's) under the stand-in capture: the same ids."""
    monkeypatch.setattr(cuda_graph, "capture_cuda_graph", faked([]))
    model = small()
    prompt = torch.randint(0, V, (1, 3), generator=torch.Generator().manual_seed(22))
    static, _ = generations(model, prompt, 2 * C, "static", 0.8, seed=6)
    compiled, _ = generations(model, prompt, 2 * C, "compiled", 0.8, seed=6)
    assert_same(compiled, static)
