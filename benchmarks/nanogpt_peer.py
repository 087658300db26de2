"""nanoGPT beside us: its `model.py` trained for a budget as its `train.py` would, scored as `evaluate.py` scores ours.

    python benchmarks/nanogpt_peer.py --nanogpt ~/src/nanoGPT --corpus train.txt --heldout heldout.txt \
        --seconds 300 [--seed 1337] [--out runs/peer/nanogpt]

Design choices:
- Its `model.py` is imported from the `--nanogpt` checkout, never copied; the loop costs what its `train.py`'s does
  (a memmap per batch, evaluations, checkpoints) with its defaults (`SETTINGS`) at the lecture model's size.
- The cosine decays over the time budget, as ours; our char tokenizer makes the bins: both score the same characters.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: only benchmarks/ is on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import options as opt  # noqa: E402
from common.errors import UserError  # noqa: E402


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = opt.script_parser("nanogpt_peer.py", __doc__)
    ap.add_argument("--nanogpt", required=True, check=opt.NANOGPT, help="a checkout of github.com/karpathy/nanoGPT")
    ap.add_argument(
        "--corpus",
        required=True,
        check=opt.text_file,
        help="the training text (its first 90%% trains, the rest validates)",
    )
    ap.add_argument(
        "--heldout", required=True, check=opt.text_file, help="text none of the runs trained on, scored at the end"
    )
    ap.add_argument("--seconds", default=300.0, check=opt.SECONDS, help="wall-clock budget (default 300)")
    ap.add_argument("--steps", default=None, check=opt.count(), help="a step budget instead of --seconds")
    ap.add_argument("--seed", default=1337, check=opt.count(0))
    ap.add_argument("--out", default="runs/peer/nanogpt", check=opt.out_folder, help="where its bins and checkpoint go")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one of nanoGPT's settings (e.g. dropout=0.1); repeatable",
    )
    return ap.parse_args(argv)


SETTINGS = dict(
    n_layer=4,
    n_head=4,
    n_embd=128,
    block_size=128,
    bias=False,
    dropout=0.0,
    batch_size=8,
    learning_rate=2e-3,
    min_lr=2e-4,
    warmup_iters=100,
    weight_decay=0.1,
    beta1=0.9,
    beta2=0.95,
    grad_clip=1.0,
    eval_interval=2000,
    eval_iters=200,
    log_interval=1,
)

# our size keys -> GPTConfig's (and SETTINGS')
GPT_NAMES = {"num_blocks": "n_layer", "num_heads": "n_head", "embedding_size": "n_embd", "context_length": "block_size"}


def settings(overrides: list[str]) -> dict:
    s = dict(SETTINGS)
    for item in overrides:
        key, _, value = item.partition("=")
        if key not in s:
            raise UserError(f"--set {item}: unknown setting; known: {', '.join(s)}")
        s[key] = type(s[key])(value) if not isinstance(s[key], bool) else value.lower() in ("1", "true")
    return s


def nanogpt_module(checkout: str | Path):
    """nanoGPT's model.py, imported from its checkout (never copied into this project)."""
    spec = importlib.util.spec_from_file_location("nanogpt_model", Path(checkout).expanduser() / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nanogpt_model(module, vocab: int, size: dict, bias: bool = False, dropout: float = 0.0, seed: int = 0):
    """nanoGPT's GPT at a size in our names, seeded; its parameter count goes to stderr, off the JSON."""
    import torch

    torch.manual_seed(seed)
    config = module.GPTConfig(
        vocab_size=vocab, dropout=dropout, bias=bias, **{n: size[k] for k, n in GPT_NAMES.items()}
    )
    with contextlib.redirect_stdout(sys.stderr):
        return module.GPT(config)


def write_bins(corpus: Path, out: Path):
    """nanoGPT's data folder (train.bin, val.bin as uint16) from our char tokenizer; returns the tokenizer."""
    import numpy as np

    from data.corpus import load_corpus

    c = load_corpus(corpus, cache_dir=out / "cache")
    n_train = int(len(c.tokens) * 0.9)
    out.mkdir(parents=True, exist_ok=True)
    np.asarray(c.tokens[:n_train], dtype=np.uint16).tofile(out / "train.bin")
    np.asarray(c.tokens[n_train:], dtype=np.uint16).tofile(out / "val.bin")
    return c.tokenizer


def nanogpt_lr(s: dict, step: int, fraction: float) -> float:
    """train.py's get_lr, decaying over the time budget (`fraction` of it used) instead of lr_decay_iters."""
    lr, lo, warm = s["learning_rate"], s["min_lr"], s["warmup_iters"]
    if step < warm:
        return lr * (step + 1) / (warm + 1)
    return lo + 0.5 * (1.0 + math.cos(math.pi * min(1.0, fraction))) * (lr - lo)


def train(gpt_module, s: dict, vocab_size: int, data: Path, seconds: float, steps: int | None, seed: int):
    """nanoGPT's train.py loop, stopped by the clock (or after `steps`); returns (model, steps, seconds)."""
    import numpy as np
    import torch

    from training.optim.factory import clip_and_update

    size = {k: s[n] for k, n in GPT_NAMES.items()}
    model = nanogpt_model(gpt_module, vocab_size, size, s["bias"], s["dropout"], seed)
    optimizer = model.configure_optimizers(s["weight_decay"], s["learning_rate"], (s["beta1"], s["beta2"]), "cpu")
    B, T = s["batch_size"], s["block_size"]

    def get_batch(split: str):
        d = np.memmap(data / f"{split}.bin", dtype=np.uint16, mode="r")  # train.py re-opens it every batch
        ix = torch.randint(len(d) - T, (B,))
        x = torch.stack([torch.from_numpy(d[i : i + T].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(d[i + 1 : i + 1 + T].astype(np.int64)) for i in ix])
        return x, y

    @torch.no_grad()
    def estimate_loss():
        model.eval()
        out = {
            k: float(torch.tensor([model(*get_batch(k))[1].item() for _ in range(s["eval_iters"])]).mean())
            for k in ("train", "val")
        }
        model.train()
        return out

    step, started = 0, time.perf_counter()
    X, Y = get_batch("train")
    while True:
        progress = (time.perf_counter() - started) / seconds if steps is None else step / steps
        if progress >= 1:
            break
        for group in optimizer.param_groups:
            group["lr"] = nanogpt_lr(s, step, progress)
        if step % s["eval_interval"] == 0:
            losses = estimate_loss()
            if step:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, data / "ckpt.pt")
            print(f"step {step}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}", file=sys.stderr)
        _, loss = model(X, Y)
        X, Y = get_batch("train")
        loss.backward()
        clip_and_update(model.parameters(), optimizer, s["grad_clip"])  # nanoGPT's clipping, then its update
        optimizer.zero_grad(set_to_none=True)
        if step % s["log_interval"] == 0:
            loss.item()
        step += 1
    return model, step, time.perf_counter() - started


def score(model, tokenizer, heldout: Path, context_length: int) -> dict:
    """`evaluate.py`'s numbers for nanoGPT's model (which returns full logits only when given targets)."""
    import torch
    from torch import nn

    from inference.scoring import evaluate_file

    class FullLogits(nn.Module):
        def __init__(self, gpt):
            super().__init__()
            self.gpt, self.context_length = gpt, context_length

        def forward(self, idx):
            idx = idx.contiguous()
            return self.gpt(idx, idx)[0], None

    return evaluate_file(
        FullLogits(model), tokenizer, heldout, None, 32, torch.device("cpu"), contextlib.nullcontext, progress=False
    )


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    s = settings(args.set)
    out = Path(args.out)
    tokenizer = write_bins(Path(args.corpus).expanduser(), out)
    model, steps, seconds = train(
        nanogpt_module(args.nanogpt), s, tokenizer.vocab_size, out, args.seconds, args.steps, args.seed
    )
    tps = steps * s["batch_size"] * s["block_size"] / seconds
    result = score(model.eval(), tokenizer, Path(args.heldout).expanduser(), s["block_size"])
    opt.print_json(
        {
            "name": "nanogpt",
            "seed": args.seed,
            "seconds": args.seconds,
            "seconds_run": round(seconds, 1),
            "steps": steps,
            "tokens": steps * s["batch_size"] * s["block_size"],
            "tokens_per_sec": round(tps, 1),
            "heldout_loss": result["loss"],
            "heldout_bpc": result["bpc"],
            "heldout_chars": result["chars"],
            "threads": int(os.environ.get("OMP_NUM_THREADS", 0)) or None,
            "settings": s,
        }
    )


if __name__ == "__main__":
    opt.run_script(main)
