"""The whole training step as one CUDA graph (`torch.cuda.graph`): captured once, then replayed at every step.

Design choices:
- A small model on a GPU spends most of a step launching kernels one by one; a replay launches the whole step at once.
- The graph holds every micro-batch's forward and backward (autocast without its weight cache, which a replay could
  not refill) and, where the optimizer can be replayed, clipping and the update: fused `capturable` AdamW without a
  loss scaler, its learning rate a device tensor (training/optim/factory.py `set_lr`). Muon and float16's loss
  scaler (whose step reads back an overflow) run eagerly after each replay on the gradients the graph wrote.
- Inputs are static buffers each step copies its batches into; the step returns copies of the static outputs, so
  nothing reads them after the next replay overwrote them. The gradients live in the graph's memory: never set to
  None after the capture; the first micro-batch's backward writes them, the others add.
- The warm-up steps are real steps of the run: the recorded function run eagerly on the capture's side stream, so
  the optimizer's state, cuBLAS's workspace and inductor's kernels exist before the capture and nothing compiles in
  it. The step the capture records is replayed at once. Dropout stays random (the CUDA generator's offset moves).
- The capture is model/cuda_graph.py's `CudaGraph`, injectable: a CPU test's stand-in replays by calling the
  recorded function, which writes the same static tensors.
"""

from __future__ import annotations

import contextlib
import time

import torch
from torch import Tensor

from training.state import Session
from training.step import Batches, apply_gradients, forward_backward

WARMUP_STEPS = 2  # eager steps on the side stream before the capture


class GraphUnavailable(RuntimeError):
    """The step could not be captured; the run goes on without a graph."""


class GraphStep:
    """Steps of a `Session` run as one captured graph (see the module docstring): `train_step` calls it as its run."""

    def __init__(self, s: Session, backend, model: torch.nn.Module) -> None:
        t = s.job.train
        self.s, self.backend, self.model = s, backend, model
        shape = (t.grad_accum_steps, t.batch_size, s.raw_model.context_length)
        self.x = torch.zeros(shape, dtype=torch.long, device=s.device)
        self.y = torch.zeros(shape, dtype=torch.long, device=s.device)
        self.loss = torch.zeros((), device=s.device)
        self.grad_norm = torch.zeros((), device=s.device)
        # the optimizer's step can be replayed where it is PyTorch's fused AdamW, with no loss scaler
        self.optimizer_inside = type(s.optimizer) is torch.optim.AdamW and not s.scaler.is_enabled()
        self.warmed, self.captured = 0, False
        self.capture_seconds = 0.0

    def __call__(self, mtp: list[float]) -> tuple[Tensor, Tensor]:
        """One step's forward, backward and update (training/step.py `train_step` runs it): the first steps eagerly
        on the capture's side stream, then the capture, then a replay each step."""
        s = self.s
        warming = not self.captured and self.warmed < WARMUP_STEPS
        if not self.captured and not warming:
            self._capture()
        self._fill(s.sampler.next_batch() for _ in range(self.x.shape[0]))
        if warming:  # the very step the capture will record, run eagerly: inductor compiles for these inputs
            self.warmed += 1
            with self.backend.side():
                self._body()
                grad_norm = self.grad_norm if self.optimizer_inside else apply_gradients(s)
                s.optimizer.zero_grad(set_to_none=True)
        else:
            self.backend.replay()
            grad_norm = self.grad_norm if self.optimizer_inside else apply_gradients(s)
        return self.loss.clone(), grad_norm.clone()

    def _fill(self, batches: Batches) -> None:
        """The step's batches copied into the static inputs."""
        for micro, (x, y) in enumerate(batches):
            self.x[micro].copy_(x)
            self.y[micro].copy_(y)

    def compile_pass(self) -> None:
        """The recorded forward and backward once, on the step's own batches (drawn again by the step) and with no
        update, so that inductor compiles for exactly the captured inputs here, before the warm-up steps
        (training/runner/steps.py runs it where a signal may cut it short)."""
        self._fill(self.s.sampler.peek(self.x.shape[0]))
        try:
            with self.backend.side():
                self._forward_backward()
        finally:
            self.s.optimizer.zero_grad(set_to_none=True)

    def _capture(self) -> None:
        s = self.s
        started = time.perf_counter()
        if self.optimizer_inside:
            hold_rates_on_device(s.optimizer, s.device)
        s.optimizer.zero_grad(set_to_none=True)
        try:
            self.backend.capture(self._body)
        except Exception as e:  # noqa: BLE001 - any failure of a capture means: go on without one
            release(s)  # (the capture has recovered the device already)
            raise GraphUnavailable(f"{type(e).__name__}: {' '.join(str(e).split())[:160]}") from e
        self.captured = True
        self.capture_seconds = time.perf_counter() - started

    def _body(self) -> None:
        """What the graph records: every micro-batch's forward and backward, the loss, and (where it can be
        replayed) clipping and the optimizer's step: training/step.py's own code, recorded."""
        self._forward_backward()
        if self.optimizer_inside:
            self.grad_norm.copy_(apply_gradients(self.s))

    def _forward_backward(self) -> None:
        """Every micro-batch's forward and backward on the static inputs; their mean loss into `self.loss`."""
        batches = zip(self.x, self.y, strict=True)
        self.loss.copy_(forward_backward(self.s, self.model, batches, [], self._autocast))

    def _autocast(self) -> contextlib.AbstractContextManager:
        """Autocast without its weight cache, which a replay could not refill."""
        s = self.s
        if s.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(s.device.type, dtype=s.dtype, cache_enabled=False)


def hold_rates_on_device(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Make AdamW replayable: `capturable`, and each group's learning rate a device tensor (a float would be
    recorded into the graph as it was at the capture)."""
    if device.type != "cuda":
        return
    for group in optimizer.param_groups:
        group["capturable"] = True
        group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
    if not getattr(optimizer, "_saves_plain_rates", False):
        optimizer.register_state_dict_post_hook(plain_rates)
        optimizer._saves_plain_rates = True


def plain_rates(optimizer: torch.optim.Optimizer, state: dict) -> dict:
    """A checkpoint records the rates as numbers and the optimizer as not capturable, as an eager run saves it."""
    for group in state["param_groups"]:
        if isinstance(group.get("lr"), Tensor):
            group["lr"] = float(group["lr"])
        if group.get("capturable"):
            group["capturable"] = False
    return state


def release(s: Session) -> None:
    """Undo `hold_rates_on_device` and drop the gradients of a failed capture: the eager step takes over."""
    plain_rates(s.optimizer, {"param_groups": s.optimizer.param_groups})
    s.optimizer.zero_grad(set_to_none=True)
