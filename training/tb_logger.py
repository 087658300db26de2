"""TensorBoard logging. Every run writes the same tag names, so runs compare side by side.

Only rank 0 logs; on other ranks every method is a no-op.
"""

from __future__ import annotations

from pathlib import Path

# The scalar tags every run writes (README and tests rely on these names).
TAGS = ("train/loss", "train/lr", "train/grad_norm", "train/tokens_per_sec", "val/loss", "val/bpc", "train/bpc")


class RunLogger:
    def __init__(self, run_dir: Path, enabled: bool = True, purge_step: int | None = None):
        self.writer = None
        if enabled:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=purge_step)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        if self.writer is None:
            return
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def text(self, tag: str, text: str, step: int) -> None:
        if self.writer is not None:
            self.writer.add_text(tag, text, step)

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
