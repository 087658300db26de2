"""Run train.py with the loss of one step made NaN: `python tests/fault_nan.py <step> [train.py overrides]`.

Fault injection lives here, not in the training loop: this wrapper replaces the loop's step function before
train.py starts, to prove that a diverged run stops and keeps its last good checkpoint.
"""

import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import training.step  # noqa: E402
import training.trainer  # noqa: E402

nan_at = int(sys.argv.pop(1))
real_step, real_loss = training.trainer.train_step, training.step.compute_loss


def step_with_fault(session, state):
    if state.step + 1 == nan_at:
        training.step.compute_loss = lambda model, x, y: real_loss(model, x, y) * float("nan")
    try:
        return real_step(session, state)
    finally:
        training.step.compute_loss = real_loss


training.trainer.train_step = step_with_fault
sys.argv[0] = str(ROOT / "train.py")
runpy.run_path(str(ROOT / "train.py"), run_name="__main__")
