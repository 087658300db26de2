"""Work in a training step that no clock measures: the operations it dispatches (tests/training/test_step_cost.py
also counts the host syncs of its loop).

    python -m benchmarks.step_ops                            # this project's model, and train.py's own step
    python -m benchmarks.step_ops --nanogpt ~/src/nanoGPT    # nanoGPT's model.py beside it (bias=False and True)

Design choices (docs/en/speed.md, "Work per step", explains the counts):
- Counted on the CPU: each dispatched op is one GPU kernel launch or more; the backward's, by ATen name, show layouts.
- Every model takes the same step (`optimizer_step`, clipped as nanoGPT's train.py clips) at the default size,
  float32, dropout 0 (so the count does not follow auto dropout), after two warm-up steps.
- tests/training/test_step_cost.py holds the counts nanoGPT's `model.py` gave (imported, never copied).
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: only benchmarks/ is on the path
    sys.path.insert(0, str(ROOT))

from benchmarks import options as opt  # noqa: E402

SIZE = dict(num_blocks=4, embedding_size=128, num_heads=4, context_length=128)  # configs/model/small.yaml's
BATCH, VOCAB = 8, 1480


class DispatchCount(TorchDispatchMode):
    """Counts every ATen operation dispatched while active, by name."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randint(0, VOCAB, (BATCH, SIZE["context_length"]), generator=g) for _ in range(2))


def _third_step_ops(step: Callable[[], object]) -> int:
    """Operations the third call of `step` dispatches: the first two warm up."""
    for _ in range(2):
        step()
    with DispatchCount() as count:
        step()
    return sum(count.ops.values())


def model_step_ops(model: torch.nn.Module) -> int:
    """Operations one model step dispatches (forward, backward, clip, fused AdamW, zero_grad), after warm-up."""
    from benchmarks.timing import optimizer_step

    return _third_step_ops(optimizer_step(model, *_batch(), clip=True))


def backward_ops(model: torch.nn.Module) -> Counter[str]:
    """Operations one backward pass dispatches (after a forward with targets, no gradient held yet), by name."""
    model.zero_grad(set_to_none=True)
    _, loss = model(*_batch())
    with DispatchCount() as count:
        loss.backward()
    model.zero_grad(set_to_none=True)
    return count.ops


def side_by_side(counts: dict[str, Counter[str]]) -> dict:
    """{model: ops} -> {"total": {model: n}, "ops": {name: {model: n}}}, names sorted, zeros shown."""
    return {
        "total": {m: sum(c.values()) for m, c in counts.items()},
        "ops": {name: {m: c[name] for m, c in counts.items()} for name in sorted(set().union(*counts.values()))},
    }


def ours() -> torch.nn.Module:
    from benchmarks.timing import seeded_model

    return seeded_model(VOCAB, SIZE, head_size=SIZE["embedding_size"], dropout=0.0)


def nanogpt(checkout: str, bias: bool) -> torch.nn.Module:
    from benchmarks.nanogpt_peer import nanogpt_model, nanogpt_module

    return nanogpt_model(nanogpt_module(checkout), VOCAB, SIZE, bias)


def train_py_step_ops(corpus: Path, run_dir: Path) -> int:
    """Operations one `train_step` of the default run dispatches (dropout 0), after two warm-up steps."""
    from benchmarks.lever_speed import session
    from training.step import train_step

    s, state = session(
        [
            "device=cpu",
            "train.dtype=float32",
            "model.dropout=0",
            f"data.path={corpus}",
            f"data.cache_dir={run_dir / 'cache'}",
            f"train.batch_size={BATCH}",
        ],
        run_dir,
    )
    return _third_step_ops(lambda: train_step(s, state))


def main(argv: list[str]) -> None:
    ap = opt.script_parser("python -m benchmarks.step_ops", __doc__)
    ap.add_argument(
        "--nanogpt", check=opt.NANOGPT, help="a checkout of github.com/karpathy/nanoGPT, counted beside this project"
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    out = {"size": {**SIZE, "batch": BATCH, "vocab_size": VOCAB}, "ours_model_step": model_step_ops(ours())}
    with tempfile.TemporaryDirectory() as tmp:
        out["ours_train_py_step"] = train_py_step_ops(ROOT / "data" / "corpus" / "ko_default.txt", Path(tmp))
    backward = {"ours": backward_ops(ours())}
    if args.nanogpt:
        for bias in (False, True):
            name = f"nanogpt_bias_{str(bias).lower()}"
            out[f"{name}_model_step"] = model_step_ops(nanogpt(args.nanogpt, bias))
            backward[name] = backward_ops(nanogpt(args.nanogpt, bias))
    out["backward"] = side_by_side(backward)
    opt.print_json(out)


if __name__ == "__main__":
    opt.run_script(main)
