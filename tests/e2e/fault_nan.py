"""Run train.py with one step made to diverge: `python tests/e2e/fault_nan.py <step>[:<kind>] [train.py overrides]`.

Kinds: `nan` (the default) makes that step's loss NaN; `enormous` multiplies every weight by 1e30 after that step,
finite weights whose validation is NaN in float32 and bf16 alike, the loss of the step itself still finite (what a
run diverging between two loss checks leaves).

Fault injection lives here, not in the training loop: this wrapper replaces the loop's step function before
train.py starts, to prove that a diverged run stops and keeps its last good checkpoint.
"""

import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import training.step  # noqa: E402
import training.trainer  # noqa: E402

at, _, kind = sys.argv.pop(1).partition(":")
nan_at, kind = int(at), kind or "nan"
real_step, real_loss = training.trainer.train_step, training.step.compute_loss


def step_with_fault(session, state, run=None):
    if state.step + 1 == nan_at and kind == "nan":
        training.step.compute_loss = lambda model, x, y: real_loss(model, x, y) * float("nan")
    try:
        result = real_step(session, state, run)
    finally:
        training.step.compute_loss = real_loss
    if state.step == nan_at and kind == "enormous":
        with torch.no_grad():
            for p in session.raw_model.parameters():
                p.mul_(1e30)
    return result


training.trainer.train_step = step_with_fault
sys.argv[0] = str(ROOT / "train.py")
runpy.run_path(str(ROOT / "train.py"), run_name="__main__")
