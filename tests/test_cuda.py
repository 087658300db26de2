"""The CUDA path: AMP, fused kernels, torch.compile, sampling replayed as a CUDA graph. Skipped where no GPU is
present (as in CI)."""

import pytest
import torch

from model.streaming import stream
from tests.helpers import assert_bf16_cached_matches_uncached, cli, tiny_model, train_compiled

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def make(attention="fused", **options):
    return tiny_model(attention, vocab_size=300, context_length=64, embedding_size=128, head_size=128, **options).cuda()


def test_heads_and_fused_agree_under_bf16_autocast():
    a, b = make("heads"), make("fused")
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 300, (4, 64), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        la, lb = a(idx)[0].float(), b(idx)[0].float()
    assert (la - lb).norm() / la.norm() < 2e-2


@pytest.fixture
def exact_fp32():
    """TF32 (switched on by common.device for speed) would round fp32 products to 10-bit mantissas."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.parametrize("attention", ["heads", "fused"])
def test_cached_generation_matches_uncached_on_cuda(attention, exact_fp32):
    m = make(attention)
    idx = torch.randint(0, 300, (2, 5), device="cuda")
    a = [lg for _, lg in stream(m, idx, 100, temperature=0, use_cache=True)]
    b = [lg for _, lg in stream(m, idx, 100, temperature=0, use_cache=False)]
    assert all(torch.allclose(x, y, atol=1e-4) for x, y in zip(a, b, strict=True))


def test_cached_generation_matches_uncached_under_bf16_autocast_on_cuda():
    m = make()
    idx = torch.randint(0, 300, (2, 5), device="cuda")
    assert_bf16_cached_matches_uncached(m, idx, 100, "cuda")


def test_train_on_cuda_with_bf16_and_compile(tmp_path):
    run, payload = train_compiled(
        tmp_path,
        "device=cuda",
        "train.dtype=auto",
        "train.max_steps=20",
        "train.eval_interval=10",
        "train.eval_steps=2",
    )
    assert payload.step == 20
    g = cli("generate.py", f"ckpt={run}", "prompt=안녕", "max_new_tokens=20", "device=cuda")
    assert g.returncode == 0 and g.stdout.startswith("안녕"), g.stderr


def test_the_hangul_model_trains_with_held_rows_and_samples_on_cuda(tmp_path, corpus):
    run = tmp_path / "run"
    r = cli(
        "train.py",
        "model=tiny",
        "device=cuda",
        "train.dtype=auto",
        "data.tokenizer=hangul",
        "model.embedding=jamo",
        "model.head=jamo",
        f"data.path={corpus}",
        "train.max_steps=20",
        "train.eval_interval=10",
        "train.eval_steps=2",
        f"hydra.run.dir={run}",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    g = cli("generate.py", f"ckpt={run}", "prompt=똠양꿍", "max_new_tokens=20", "device=cuda", "top_p=0.9")
    assert g.returncode == 0 and g.stdout.startswith("똠양꿍"), g.stderr


# The compiled loop: the whole step as one CUDA graph (training/runner/graph.py), inductor under it, and the fallbacks.
def graph_run(tmp_path, monkeypatch, name, way, *overrides, steps=16):
    """An in-process run on the GPU whose steps run `way` (None: train.compile as given)."""
    from inference.checkpoint import load_checkpoint
    from tests.helpers import ROOT, train_job
    from training import trainer
    from training.runner import steps as step_runner

    if way is not None:
        monkeypatch.setattr(step_runner.plan, "fixed_way", lambda *a: (way, "test"))
    job = train_job(
        tmp_path,
        "device=cuda",
        f"data.path={ROOT / 'data' / 'corpus' / 'ko_default.txt'}",
        f"train.max_steps={steps}",
        "train.eval_interval=5",
        "train.log_interval=2",
        "model.dropout=0",
        *overrides,
    )
    result = trainer.train(job, tmp_path / name)
    monkeypatch.undo()
    return result, load_checkpoint(tmp_path / name / "ckpt.pt")


def close_weights(a, b, rtol):
    return all(torch.allclose(v.float(), b.model[k].float(), rtol=rtol, atol=rtol) for k, v in a.model.items())


@pytest.mark.parametrize(
    "overrides,rtol",
    [
        (("train.dtype=float32",), 1e-4),
        (("train.dtype=bfloat16", "train.grad_accum_steps=2"), 3e-2),
        (("train.dtype=float16",), 3e-2),  # the loss scaler's step runs after each replay
        (("train.dtype=float32", "train.optimizer=muon"), 1e-4),  # Muon runs after each replay
    ],
    ids=["fp32", "bf16-accumulation", "fp16-scaler", "muon"],
)
def test_the_graph_trains_as_the_eager_step_with_evaluations_and_checkpoints_between_replays(
    tmp_path, monkeypatch, overrides, rtol
):
    from training.runner.plan import EAGER, Way

    eager, eager_ckpt = graph_run(tmp_path, monkeypatch, "eager", EAGER, *overrides)
    graph, graph_ckpt = graph_run(tmp_path, monkeypatch, "graph", Way(graph=True), *overrides)
    assert graph.step == eager.step == 16
    assert graph.val_loss == pytest.approx(eager.val_loss, rel=rtol)
    assert close_weights(eager_ckpt, graph_ckpt, rtol)
    assert not any(isinstance(g["lr"], torch.Tensor) for g in graph_ckpt.training.optimizer["param_groups"])


def test_a_graphed_run_resumes_and_dropout_stays_random(tmp_path, monkeypatch):
    from training.runner.plan import Way

    whole, whole_ckpt = graph_run(tmp_path, monkeypatch, "whole", Way(graph=True), "train.dtype=float32", steps=16)
    graph_run(tmp_path, monkeypatch, "part", Way(graph=True), "train.dtype=float32", steps=8)
    resumed, resumed_ckpt = graph_run(
        tmp_path,
        monkeypatch,
        "part",
        Way(graph=True),
        "train.dtype=float32",
        f"train.resume={tmp_path / 'part'}",
        steps=16,
    )
    assert resumed.step == 16 and resumed.val_loss == pytest.approx(whole.val_loss, rel=1e-3)
    # A replay moves the generator on as the eager kernels would: the same masks, step for step (frozen masks would
    # part the runs at once)
    a, _ = graph_run(tmp_path, monkeypatch, "drop_a", Way(graph=True), "model.dropout=0.2", "seed=3")
    b, _ = graph_run(tmp_path, monkeypatch, "drop_b", None, "model.dropout=0.2", "seed=3", "train.compile=false")
    c, _ = graph_run(tmp_path, monkeypatch, "drop_c", None, "model.dropout=0", "seed=3", "train.compile=false")
    assert a.val_loss == pytest.approx(b.val_loss, rel=1e-3) and a.val_loss != c.val_loss


def test_inductor_under_the_graph_trains_as_eager(tmp_path, monkeypatch, capsys):
    eager, _ = graph_run(tmp_path, monkeypatch, "eager", None, "train.compile=false", "train.dtype=bfloat16")
    compiled, _ = graph_run(tmp_path, monkeypatch, "compiled", None, "train.compile=true", "train.dtype=bfloat16")
    assert compiled.val_loss == pytest.approx(eager.val_loss, rel=3e-2)
    out = capsys.readouterr().out
    assert "compile: inductor and a CUDA graph of the whole step (train.compile=true)" in out
    assert "graph captured in" in out


def test_a_capture_that_fails_on_the_card_leaves_the_run_going(tmp_path, monkeypatch, capsys):
    from model.cuda_graph import CudaGraph
    from training.runner.plan import Way

    def refuse(self, fn, *args):
        raise RuntimeError("capture refused by the test")

    monkeypatch.setattr(CudaGraph, "capture", refuse)
    result, _ = graph_run(tmp_path, monkeypatch, "fallback", Way(graph=True), "train.dtype=bfloat16")
    assert (
        result.step == 16
        and "could not be built (RuntimeError: capture refused by the test)" in capsys.readouterr().out
    )


def test_auto_graphs_a_time_budgeted_run(tmp_path):
    from tests.helpers import cli

    run = tmp_path / "run"
    r = cli("train.py", "device=cuda", "train.max_seconds=8", "train.compile=auto", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    said = [line for line in r.stdout.splitlines() if line.startswith("compile: ")]
    assert said[0].startswith("compile: a CUDA graph of the whole step (train.compile=auto; about "), said
    assert any("graph captured in" in line for line in said), said


MODERN = dict(position="rope", norm="rmsnorm", qk_norm=True, mlp="relu2")


def graph_and_static(m, idx, n, **sampling):
    """[(ids, logits)] of the same generation (seed 3) with the graph replayed and with the static step eager."""
    out = {}
    for decoder in ("graph", "static"):
        g = torch.Generator(device="cuda").manual_seed(3)
        out[decoder] = list(stream(m, idx, n, generator=g, decoder=decoder, **sampling))
    return out["graph"], out["static"]


def assert_same_text(graph, static, tol=1e-5):
    for step, ((ta, la), (tb, lb)) in enumerate(zip(graph, static, strict=True)):
        assert torch.equal(ta, tb), f"step {step}: {ta.tolist()} != {tb.tolist()}"
        torch.testing.assert_close(la, lb, rtol=tol, atol=tol)


@pytest.mark.parametrize("options", [{}, MODERN], ids=["learned", "rope"])
@pytest.mark.parametrize("batch", [1, 3])
def test_the_graph_sampler_gives_the_eager_static_steps_text(options, batch, exact_fp32, capsys):
    m = tiny_model(vocab_size=300, context_length=64, embedding_size=128, head_size=128, **options).cuda()
    idx = torch.randint(0, 300, (batch, 5), device="cuda")
    graph, static = graph_and_static(m, idx, 3 * m.context_length, temperature=0.8, top_k=100, top_p=0.95)
    assert_same_text(graph, static)
    err = capsys.readouterr().err
    assert err.count("sampling: captured as a CUDA graph in ") == (1 if options else 2), err  # learned: the refill
    again, _ = graph_and_static(m, idx, 3 * m.context_length, temperature=0.8, top_k=100, top_p=0.95)
    assert_same_text(again, static)  # the kept graph, replayed for a second generation
    assert "captured" not in capsys.readouterr().err


@pytest.mark.parametrize("options", [{}, MODERN], ids=["learned", "rope"])
def test_the_compiled_graph_sampler_gives_the_eager_static_steps_text(options, exact_fp32):
    """inductor's kernels under the step's and the refills' graphs (decoder=compiled): the same ids."""
    m = tiny_model(vocab_size=300, context_length=64, embedding_size=128, head_size=128, **options).cuda()
    idx = torch.randint(0, 300, (1, 5), device="cuda")
    out = {}
    for decoder in ("compiled", "static"):
        g = torch.Generator(device="cuda").manual_seed(3)
        out[decoder] = list(stream(m, idx, 3 * m.context_length, 0.8, generator=g, decoder=decoder))
    assert_same_text(out["compiled"], out["static"], tol=1e-4)


def test_cuda_sampling_takes_the_graph_by_default_and_gives_the_seeds_text(exact_fp32, capsys):
    m = make()
    idx = torch.randint(0, 300, (1, 5), device="cuda")
    ids = [t for t, _ in stream(m, idx, 50, 0.8, generator=torch.Generator(device="cuda").manual_seed(1))]
    assert "captured as a CUDA graph" in capsys.readouterr().err
    eager = [
        t for t, _ in stream(m, idx, 50, 0.8, generator=torch.Generator(device="cuda").manual_seed(1), decoder="static")
    ]
    assert torch.equal(torch.cat(ids), torch.cat(eager))


@pytest.mark.parametrize("precision", ["float16", "bfloat16", "bfloat16-autocast"])
def test_the_graph_sampler_in_half_precision(precision, capsys):
    m = make()
    idx = torch.randint(0, 300, (2, 5), device="cuda")
    if precision == "bfloat16-autocast":  # the cache in bf16, the weights fp32: captured with autocast's cache off
        with torch.autocast("cuda", dtype=torch.bfloat16):
            graph, static = graph_and_static(m, idx, 150, temperature=0.9)
    else:
        graph, static = graph_and_static(m.to(getattr(torch, precision)), idx, 150, temperature=0.9)
    assert_same_text(graph, static, tol=1e-2)
    assert "sampling: captured as a CUDA graph" in capsys.readouterr().err


FAILING_CAPTURE = """
import torch
from model import cuda_graph
from model.streaming import stream
from tests.helpers import tiny_model

real = cuda_graph.capture_cuda_graph

def syncing(fn, generator):
    def step():
        fn()
        if torch.cuda.is_current_stream_capturing():
            torch.zeros(1, device="cuda").item()  # a read back: not allowed while capturing
    return real(step, generator)

cuda_graph.capture_cuda_graph = syncing
m = tiny_model(vocab_size=300, context_length=64, embedding_size=128, head_size=128, position="rope").cuda()
idx = torch.randint(0, 300, (1, 5), device="cuda")
out = {}
for decoder in ("graph", "static"):
    g = torch.Generator(device="cuda").manual_seed(3)
    out[decoder] = torch.cat([t for t, _ in stream(m, idx, 100, 0.8, generator=g, decoder=decoder)])
assert torch.cuda.current_stream() == torch.cuda.default_stream(), "not back on the caller's stream"
print(torch.equal(out["graph"], out["static"]))
"""


def test_a_failed_capture_says_so_and_samples_eagerly_on_cuda():
    # its own process: a capture that failed on the device may leave the CUDA context unusable for other tests
    import subprocess
    import sys

    from tests.helpers import ROOT

    r = subprocess.run([sys.executable, "-c", FAILING_CAPTURE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr[-3000:]
    err = [line for line in r.stderr.splitlines() if line.startswith("sampling:")]
    assert (
        len(err) == 1
        and err[0].startswith("sampling: not captured as a CUDA graph (")
        and err[0].endswith("); running it eagerly")
    ), r.stderr[-3000:]


def test_the_gpu_sampling_benchmark_on_cuda():
    from benchmarks.generation_speed import sampling_speeds

    out = sampling_speeds(make(), torch.device("cuda"), new_tokens=100, rounds=1)
    assert out["same_text"] is True and out["graph"] > 0 and out["eager"] > 0


def test_a_capture_broken_on_the_card_leaves_dropout_and_training_going(tmp_path, monkeypatch, capsys):
    """A read-back inside the capture invalidates it for real; the generator must still draw afterwards (the last
    test of the file: a failed capture is the one thing here that could spoil the process's CUDA state)."""
    from training.runner.graph import GraphStep
    from training.runner.plan import Way

    body = GraphStep._body

    def reads_back(self):
        body(self)
        self.loss.item()

    monkeypatch.setattr(GraphStep, "_body", reads_back)
    result, _ = graph_run(tmp_path, monkeypatch, "broken", Way(graph=True), "model.dropout=0.2")
    assert result.step == 16 and "could not be built" in capsys.readouterr().out
    assert torch.rand(4, device="cuda").isfinite().all()  # the generator draws
