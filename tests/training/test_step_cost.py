"""What a training step asks of a device, counted on the CPU: the operations it dispatches (each one or more kernel
launches on a GPU) and the host syncs of the loop around it (each a wait for the device).

The reference is nanoGPT's model.py (karpathy/nanoGPT at 3adf61e) with `bias=True`, stepped the same way at the
same size; counted with its checkout beside this one by

    python -m benchmarks.step_ops --nanogpt PATH/TO/nanoGPT

which printed nanogpt_bias_true_model_step 451 and nanogpt_bias_false_model_step 394 (ours: 431 for the model,
443 for train.py's step), and for the backward pass alone 295 and 238 operations (ours: 291; 275 when the QKV split
was unbind's, which paid a stack and a clone per block). nanoGPT's code is never part of this repository.
"""

import contextlib
import math
from collections.abc import Iterator

import pytest
import torch
from torch.overrides import TorchFunctionMode

from benchmarks.step_ops import DispatchCount, backward_ops, model_step_ops, ours, train_py_step_ops
from tests.helpers import ROOT, tiny_model, train_job
from training import trainer

NANOGPT_BIAS_TRUE_OPS = 451  # nanoGPT model.py, bias=True, default size: see the module docstring
OUR_BACKWARD_OPS = 291  # the default model's backward pass, held (nanoGPT's: 295 with biases, 238 without)
# operations that join tensors or copy one into a new layout: on a GPU each is a memory-bound kernel (a
# CatArrayBatchedCopy, a strided elementwise copy), per block when it sits in attention
JOINS_AND_COPIES = {
    "cat",
    "stack",
    "clone",
    "copy_",
    "_to_copy",
    "contiguous",
    "_unsafe_view",
    "slice_backward",
    "select_backward",
    "index_put_",
}
# the calls that read a tensor's value into Python: on a GPU each waits for the device
SYNCS = {"item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__"}


class HostSyncs(TorchFunctionMode):
    """Records every call that reads a tensor's value into Python (each a wait for the device on a GPU)."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []
        self.pauses = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in SYNCS and not self.pauses:
            self.calls.append(name)
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Calls inside are not recorded (a part of the loop that reads values on purpose)."""
        self.pauses += 1
        try:
            yield
        finally:
            self.pauses -= 1


def test_a_model_step_dispatches_no_more_than_nanogpts():
    assert model_step_ops(ours()) <= NANOGPT_BIAS_TRUE_OPS


def test_train_py_step_dispatches_no_more_than_nanogpts_model_step(tmp_path):
    assert train_py_step_ops(ROOT / "data" / "corpus" / "ko_default.txt", tmp_path) <= NANOGPT_BIAS_TRUE_OPS


def test_the_fused_path_concatenates_and_slices_nothing():
    """One QKV matmul per block from one tensor: no concatenation in the forward, no slices in the backward."""
    model = ours()
    x = torch.randint(0, 100, (2, 16))
    with DispatchCount() as forward:
        _, loss = model(x, x)
    with DispatchCount() as backward:
        loss.backward()
    assert forward.ops["cat"] == 0 and forward.ops["slice"] == 0, forward.ops
    assert backward.ops["slice"] == 0 and backward.ops["slice_backward"] == 0, backward.ops
    assert forward.ops["mm"] + forward.ops["addmm"] == 4 * len(model.blocks) + 1  # qkv, proj, fc, proj; the head


def test_the_default_models_backward_joins_and_copies_nothing_at_a_held_count():
    """The QKV split's gradients are not stacked back together nor copied out of the heads' layout (the kernels
    nanoGPT's split pays too), and the backward dispatches no more operations than it did when this was measured."""
    ops = backward_ops(ours())
    assert not JOINS_AND_COPIES & {name for name, n in ops.items() if n}, ops
    assert sum(ops.values()) <= OUR_BACKWARD_OPS, ops
    blocks = ours().config.num_blocks  # per block: qkv (2 + 4 for its thirds), proj, fc, proj (2 each); the head
    assert ops["mm"] + ops["addmm_"] == blocks * (6 + 3 * 2) + 2, ops


@pytest.mark.parametrize(
    "settings",
    [dict(position="rope"), dict(qk_norm=True), dict(position="rope", qk_norm=True)],
    ids=["rope", "qk_norm", "rope+qk_norm"],
)
def test_rope_and_qk_norm_leave_the_backward_without_joins_or_copies(settings):
    """The switches that act on queries and keys keep their gradients in the layout the QKV split reads without a
    copy; rope's own backward is two products, a flip of the halves and a sum."""
    model = tiny_model(**settings)
    x = torch.randint(0, 50, (2, 16))
    _, loss = model(x, x)
    with DispatchCount() as backward:
        loss.backward()
    assert not JOINS_AND_COPIES & {name for name, n in backward.ops.items() if n}, backward.ops
    rotated = 2 * model.config.num_blocks if settings.get("position") == "rope" else 0  # queries and keys
    assert backward.ops["flip"] == rotated, backward.ops


@pytest.mark.parametrize("steps,log_interval,accum", [(40, 10, 1), (12, 5, 2)])
def test_the_loop_reads_the_device_once_per_log_interval(tmp_path, monkeypatch, steps, log_interval, accum):
    """Host syncs over the steps of a real run, its evaluations and checkpoints aside (they read on purpose)."""
    syncs = HostSyncs()

    def unwatched(fn):
        def call(*args, **kwargs):
            with syncs.paused():  # the checks an evaluation or a save makes are their own
                return fn(*args, **kwargs)

        return call

    def watched_loop(*args, **kwargs):
        with syncs:
            return real_loop(*args, **kwargs)

    real_loop = trainer.run_steps
    monkeypatch.setattr(trainer, "run_steps", watched_loop)
    monkeypatch.setattr(trainer, "validate", unwatched(trainer.validate))
    monkeypatch.setattr(trainer, "save", unwatched(trainer.save))
    corpus = ROOT / "data" / "corpus" / "ko_default.txt"
    result = trainer.train(
        train_job(
            tmp_path,
            f"data.path={corpus}",
            f"train.max_steps={steps}",
            f"train.log_interval={log_interval}",
            f"train.grad_accum_steps={accum}",
            "train.eval_interval=1000",
        ),
        tmp_path / "run",
    )
    assert result.step == steps and math.isfinite(result.train_loss)
    assert len(syncs.calls) <= math.ceil(steps / log_interval), syncs.calls


def test_a_nan_between_checks_stops_the_run_naming_its_steps_and_saves_nothing(tmp_path, monkeypatch):
    from training import step as step_module
    from training.guards.divergence import TrainingDiverged

    real, calls = step_module.compute_loss, []

    def nan_at_seventh(model, x, y):
        calls.append(1)
        loss = real(model, x, y)
        return loss * float("nan") if len(calls) == 7 else loss

    monkeypatch.setattr(step_module, "compute_loss", nan_at_seventh)
    corpus, run = ROOT / "data" / "corpus" / "ko_default.txt", tmp_path / "run"
    with pytest.raises(TrainingDiverged, match=r"^the loss became nan between steps 6 and 10; stopped without saving"):
        trainer.train(
            train_job(
                tmp_path,
                f"data.path={corpus}",
                "train.max_steps=20",
                "train.log_interval=5",
                "train.eval_interval=100",
                "model.dropout=0",
            ),
            run,
        )
    assert not (run / "ckpt.pt").exists() and not (run / "best.pt").exists()
