"""Nothing non-finite is ever saved: a run that diverges, however it shows (a NaN loss between two checks,
finite but enormous weights whose validation is NaN, a weight that is not finite, an evaluation that returns NaN),
at the last step as well as before it, in float32 and under bf16 autocast, stops with exit 3 and one line naming the
steps since the last good check, its checkpoints and its recorded settings byte for byte as they were.

The faults are injected deterministically, at a chosen step, around the loop's step function (as tests/e2e/fault_nan.py
does for the command line); the runs are tiny and in-process, the one command-line run checks what only train.py
does (the exit code, the .hydra record)."""

from __future__ import annotations

import math

import pytest
import torch

from common.atomic_files import file_sha256
from inference.checkpoint import load_checkpoint
from tests.helpers import TINY, cli, stderr_lines, train_job
from training import trainer
from training.guards.divergence import TrainingDiverged

NAMES = ("ckpt.pt", "best.pt")
KEPT = "stopped without saving, the last good checkpoint is kept (step 3); try a lower train.lr"


def _hashes(run) -> dict[str, str]:
    return {name: file_sha256(run / name) for name in NAMES if (run / name).exists()}


def _inject(monkeypatch, run, kind: str, at: int) -> dict:
    """Make step `at` diverge as `kind`; returns the checkpoints' hashes as they were just before it."""
    from training import step as step_module

    real_step, real_loss, real_evaluate, before = trainer.train_step, step_module.compute_loss, trainer.evaluate, {}

    def faulty_step(s, state, how=None):
        if state.step + 1 != at:
            return real_step(s, state, how)
        before.update(_hashes(run))
        if kind == "nan_loss":
            monkeypatch.setattr(step_module, "compute_loss", lambda m, x, y: real_loss(m, x, y) * float("nan"))
        result = real_step(s, state, how)
        monkeypatch.setattr(step_module, "compute_loss", real_loss)
        with torch.no_grad():
            if kind == "enormous_weights":  # finite, and the validation overflows: NaN in float32 and bf16 alike
                for p in s.raw_model.parameters():
                    p.mul_(1e30)
            elif kind == "inf_weight":  # scored as if nothing happened, so only the weights' own check finds it
                next(s.raw_model.parameters()).view(-1)[0] = float("inf")
                monkeypatch.setattr(trainer, "evaluate", lambda s: (4.0, 4.0))
            elif kind == "nan_evaluation":
                monkeypatch.setattr(trainer, "evaluate", lambda s: (real_evaluate(s)[0], float("nan")))
        return result

    monkeypatch.setattr(trainer, "train_step", faulty_step)
    return before


CASES = {  # kind, the step it strikes -> the start of the one line
    ("nan_loss", 5): "the loss became nan between steps 4 and 6; ",  # found at the last step's check
    ("enormous_weights", 6): "the validation loss became nan between steps 4 and 6; ",
    ("inf_weight", 6): "the model weights became non-finite between steps 4 and 6; ",
    ("nan_evaluation", 5): "the validation loss became nan between steps 4 and 6; ",
}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-at-{c[1]}")
def test_a_diverging_run_never_replaces_its_good_checkpoint(tmp_path, corpus, monkeypatch, dtype, case):
    run = tmp_path / "run"
    before = _inject(monkeypatch, run, *case)
    job = train_job(
        tmp_path,
        f"data.path={corpus}",
        "train.max_steps=6",
        "train.eval_interval=3",
        "train.log_interval=100",
        "train.snapshot_interval=0",
        f"train.dtype={dtype}",
    )
    with pytest.raises(TrainingDiverged) as e:
        trainer.train(job, run)
    assert str(e.value) == CASES[case] + KEPT + " or train.grad_clip=1.0", str(e.value)
    assert before and _hashes(run) == before  # byte for byte
    ckpt = load_checkpoint(run / "ckpt.pt")
    assert ckpt.step == 3 and math.isfinite(ckpt.training.val_loss)
    assert all(torch.isfinite(v).all() for v in ckpt.model.values())


def test_a_run_that_never_saved_says_so(tmp_path, corpus, monkeypatch):
    run = tmp_path / "run"
    _inject(monkeypatch, run, "nan_evaluation", 3)
    with pytest.raises(
        TrainingDiverged,
        match=r"^the validation loss became nan between steps 1 and 3; stopped "
        r"without saving \(no checkpoint had been written yet\); ",
    ):
        trainer.train(
            train_job(
                tmp_path,
                f"data.path={corpus}",
                "train.max_steps=6",
                "train.eval_interval=3",
                "train.snapshot_interval=0",
                "train.dtype=float32",
            ),
            run,
        )
    assert not any(run.glob("*.pt"))


def test_a_refused_resume_leaves_the_run_as_it_was(tmp_path, corpus):
    """train.py: exit 3, one line, the checkpoints and the .hydra record byte for byte (a resume writes its own
    overrides there before any of our code runs: they are put back when it saves nothing)."""
    run = tmp_path / "run"
    common = (*TINY, "train.dtype=bfloat16", f"data.path={corpus}", f"data.cache_dir={tmp_path / 'cache'}")
    r = cli("train.py", *common, "train.max_steps=4", "train.eval_interval=4", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr
    files = [*(run / name for name in NAMES), *sorted((run / ".hydra").iterdir())]
    before = {p: p.read_bytes() for p in files}
    r = cli(
        "tests/e2e/fault_nan.py",
        "6:enormous",
        *common,
        "train.max_steps=6",
        "train.eval_interval=100",
        f"train.resume={run}",
    )
    assert r.returncode == 3, r.stderr
    lines = stderr_lines(r.stderr)
    assert "Traceback" not in r.stderr and lines[-1].startswith(
        "error: the validation loss became nan between "
        "steps 5 and 6; stopped without saving, the last "
        "good checkpoint is kept (step 4)"
    ), r.stderr
    assert {p: p.read_bytes() for p in files} == before
