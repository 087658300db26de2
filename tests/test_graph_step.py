"""The loop around a CUDA graph of the whole step (training/runner/graph.py, training/runner/steps.py), on the CPU.

A CUDA graph cannot run here, so its stand-in `EagerReplay` records the step's function and calls it at each replay;
it writes the same static tensors a replay does. What that proves: the batches go through the static buffers, the
loss and gradient norm are copied out before the next replay overwrites them, the optimizer's and the average's
updates happen once per step, and a capture that fails leaves the run eager. tests/test_cuda.py runs the real graph.
"""

import contextlib
import math

import pytest
import torch

from inference.checkpoint import load_checkpoint
from tests.helpers import ROOT, scalar_tags, train_job
from training import trainer
from training.runner import steps as step_runner
from training.runner.plan import Way

CORPUS = ROOT / "data" / "corpus" / "ko_default.txt"
STEPS = 14


class EagerReplay:
    """A stand-in for model/cuda_graph.py's `CudaGraph` on any device: `replay` runs the recorded function, with the
    gradients released first as a replay overwrites them."""

    def __init__(self, params):
        self.params, self.fn = params, None

    def side(self):
        return contextlib.nullcontext()

    def capture(self, fn):
        self.fn = fn

    def replay(self):
        for p in self.params:
            p.grad = None
        self.fn()


def graphed(monkeypatch, backend=None):
    """Make the loop run the graph path on the CPU, with `backend(session)` (the stand-in by default)."""
    backend = backend or (lambda s: EagerReplay(list(s.raw_model.parameters())))
    monkeypatch.setattr(step_runner, "fixed_way", lambda *a: (Way(graph=True), "test"))
    monkeypatch.setattr(trainer, "StepRunner", lambda s: step_runner.StepRunner(s, graph_backend=backend))


def run(tmp_path, name, *overrides):
    job = train_job(tmp_path, f"data.path={CORPUS}", f"train.max_steps={STEPS}", "train.log_interval=3",
                    "train.eval_interval=7", *overrides)
    result = trainer.train(job, tmp_path / name)
    return result, load_checkpoint(tmp_path / name / "ckpt.pt"), scalar_tags(tmp_path / name)


@pytest.mark.parametrize("overrides", [
    (),
    ("train.grad_accum_steps=2", "model.dropout=0.1"),
    ("train.optimizer=muon",),  # Muon's step runs eagerly after each replay
    ("train.average=ema", "train.ema_half_life=3"),
], ids=["plain", "accumulation-dropout", "muon", "ema"])
def test_the_graph_path_trains_exactly_as_the_eager_step(tmp_path, monkeypatch, capsys, overrides):
    eager, eager_ckpt, eager_tags = run(tmp_path, "eager", *overrides)
    graphed(monkeypatch)
    graph, graph_ckpt, graph_tags = run(tmp_path, "graph", "train.compile=true", *overrides)
    assert graph.step == eager.step == STEPS
    assert all(torch.equal(v, graph_ckpt.model[k]) for k, v in eager_ckpt.model.items())
    assert (graph_ckpt.averaged is None) is (eager_ckpt.averaged is None)
    assert all(torch.equal(v, graph_ckpt.averaged[k]) for k, v in (eager_ckpt.averaged or {}).items())
    assert graph_ckpt.training.optimizer["param_groups"] == eager_ckpt.training.optimizer["param_groups"]
    for tag in ("train/loss", "train/grad_norm", "val/loss", "train/lr"):
        assert graph_tags[tag] == eager_tags[tag], tag
    out = capsys.readouterr().out
    assert "compile: a CUDA graph of the whole step (test)" in out
    assert "compile: warm-up took" in out and "graph captured in" in out


def test_a_nan_right_after_a_check_is_still_caught(tmp_path, monkeypatch):
    """The step's loss is a static tensor the next replay overwrites: the loss watch must hold a copy."""
    from training import step as step_module
    from training.guards.divergence import TrainingDiverged

    real, calls = step_module.compute_loss, []

    def nan_at(model, x, y):
        calls.append(1)
        loss = real(model, x, y)
        return loss * float("nan") if len(calls) == 8 else loss  # step 8: the first after the check at step 7

    monkeypatch.setattr(step_module, "compute_loss", nan_at)
    graphed(monkeypatch)
    with pytest.raises(TrainingDiverged, match=r"^the loss became nan between steps 8 and 9"):
        run(tmp_path, "nan", "model.dropout=0", "train.compile=true")


def test_a_capture_that_fails_says_so_in_one_line_and_the_run_goes_on_eagerly(tmp_path, monkeypatch, capsys):
    class Refuses(EagerReplay):
        def capture(self, fn):
            raise RuntimeError("operation not permitted when stream is capturing\nsecond line")

    eager, eager_ckpt, _ = run(tmp_path, "eager")
    graphed(monkeypatch, lambda s: Refuses(list(s.raw_model.parameters())))
    result, ckpt, _ = run(tmp_path, "fallback", "train.compile=true")
    lines = [line for line in capsys.readouterr().out.splitlines() if "could not be built" in line]
    assert lines == ["compile: the CUDA graph could not be built (RuntimeError: operation not permitted when stream "
                     "is capturing second line); the steps go on without it"]
    assert result.step == STEPS and math.isfinite(result.val_loss)
    assert all(torch.equal(v, ckpt.model[k]) for k, v in eager_ckpt.model.items())


def test_an_inductor_failure_on_its_first_step_leaves_the_run_eager(tmp_path, monkeypatch, capsys):
    class Broken(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self._orig_mod = model

        def forward(self, *args, **kwargs):
            raise RuntimeError("inductor could not build a kernel")

    monkeypatch.setattr(step_runner.torch, "compile", Broken)
    monkeypatch.setattr(step_runner, "fixed_way", lambda *a: (Way(inductor=True), "test"))
    result, _, _ = run(tmp_path, "broken", "train.compile=true")
    out = capsys.readouterr().out
    assert "compile: inductor failed (RuntimeError: inductor could not build a kernel); the steps go on without it" \
        in out
    assert result.step == STEPS and math.isfinite(result.val_loss)
