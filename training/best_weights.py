"""Where a run stood best: the noise margin of validation, and the lines that end a run whose end is worse.

Design choices:
- Validation is estimated on the same `train.eval_steps` batches at every evaluation, so it moves between two
  evaluations only because the weights moved; near its best it still jitters around its trend. Measured on
  model=small over the built-in corpus with evaluations every 25 steps at the default 20 batches
  (docs/en/training.md): 0.02 bits per character of standard deviation around the trend (0.055 at most), and
  consecutive evaluations a median 0.016 apart (0.04 at the 90th percentile). `NOISE_MARGIN_BPC` is two and a half
  times that deviation: a last validation worse than the best by more than it has turned (the run memorises); by
  less, it is where the best was, since the best is itself the luckiest of several jittering evaluations. It is in
  bits per character so that it means the same for every tokenizer.
- The margin decides two things: whether the run's last lines say that validation turned (best step and loss,
  last step and loss, the file the readers use), and whether early stopping may stop a run (training/early_stop.py):
  validation that only jitters around its best has not turned.
- Which file the readers use is found as they find it (inference/run_files.py), from the files on disk, so the
  line never says something a reader then contradicts.
"""

from __future__ import annotations

import math
from pathlib import Path

from cli.overrides import shell_path
from common.errors import UserError
from inference.checkpoint import BEST_NAME, CKPT_NAME
from inference.run_files import folder_file
from training.evaluation import bits_per_char

NOISE_MARGIN_BPC = 0.05
READERS = "generate.py, evaluate.py, serve.py, export.py and train.init_from"


def margin_nats(tokens_per_char: float) -> float:
    """The noise margin in the loss's own unit, nats per token."""
    return NOISE_MARGIN_BPC * math.log(2) / max(tokens_per_char, 1e-9)


def turned(val_loss: float, best_val_loss: float, tokens_per_char: float) -> bool:
    """Whether `val_loss` is worse than the best by more than the noise margin."""
    return math.isfinite(val_loss) and val_loss > best_val_loss + margin_nats(tokens_per_char)


def closing_lines(run_dir: Path, tokens_per_char: float) -> list[str]:
    """The lines that end a run whose last validation is worse than its best beyond the noise margin: where it stood
    best, where it ended, and which file the readers use; none when the end is the best or within the margin."""
    try:
        chosen = folder_file(run_dir)
    except UserError:  # a file that cannot be read: every reader says so in its own line
        return []
    if chosen.chosen != "best" or chosen.other is None:
        return []
    best, last = chosen.header, chosen.other
    if not turned(last.val_loss, best.val_loss, tokens_per_char):
        return []
    bpc = lambda loss: bits_per_char(loss, tokens_per_char)  # noqa: E731 - a local shorthand
    worse = bpc(last.val_loss) - bpc(best.val_loss)
    return [f"validation turned: the best was step {best.step}, val loss {best.val_loss:.4f} "
            f"({bpc(best.val_loss):.4f} bpc); the last, step {last.step}, {last.val_loss:.4f} "
            f"({bpc(last.val_loss):.4f} bpc, {worse:.3f} bpc worse)",
            f"{READERS} read {BEST_NAME} (the best) from this run; ckpt={shell_path(run_dir / CKPT_NAME)} reads the "
            "last weights"]
