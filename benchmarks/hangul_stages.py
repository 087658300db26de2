"""Where a model loses bits on Hangul, stage by stage: the staged head's three choices read off any model.

    python -m benchmarks.hangul_stages runs/hangul/nsmc/char-seed1337 runs/hangul/nsmc/hangul+jamo-in+out-seed1337 \
        --text runs/hangul/splits/<corpus>/heldout.txt --train runs/hangul/splits/<corpus>/train.txt

Design choices:
- A one-token-per-character model's next-character distribution, summed over the syllables sharing an initial or an
  (initial, medial) pair, gives the staged head's three stages; only characters of the training text are scored.
- Non-overlapping windows, each target predicted once, as `hangul_compare` scores; sums in float64: exact marginals.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: only benchmarks/ is on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import options as opt  # noqa: E402
from common.errors import UserError  # noqa: E402


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = opt.script_parser("hangul_stages.py", __doc__)
    ap.add_argument(
        "runs", nargs="+", metavar="RUN", check=opt.run_or_checkpoint, help="run directories or checkpoint files"
    )
    ap.add_argument("--text", required=True, check=opt.text_file, help="held-out text to score")
    ap.add_argument(
        "--train", required=True, check=opt.text_file, help="the text the runs trained on (which characters were seen)"
    )
    ap.add_argument(
        "--chars", default=60000, check=opt.count(), help="score the first N characters of --text (default 60000)"
    )
    return ap.parse_args(argv)


def syllable_tables(chars: list[str]):
    """One-hot float64 maps id -> initial (V, 19) and id -> (initial, medial) (V, 399), and both indices."""
    import torch

    from tokenizer.jamo import NUM_FINALS, NUM_INITIALS, NUM_MEDIALS, NUM_SYLLABLES, SYLLABLE_FIRST

    code = torch.tensor([ord(c) - SYLLABLE_FIRST if len(c) == 1 else -1 for c in chars])
    syl = (code >= 0) & (code < NUM_SYLLABLES)
    initial = torch.where(syl, code // (NUM_MEDIALS * NUM_FINALS), -1)
    pair = torch.where(syl, code // NUM_FINALS, -1)
    rows = syl.nonzero().squeeze(1)
    by_initial = torch.zeros(len(chars), NUM_INITIALS, dtype=torch.float64)
    by_pair = torch.zeros(len(chars), NUM_INITIALS * NUM_MEDIALS, dtype=torch.float64)
    by_initial[rows, initial[rows]] = 1
    by_pair[rows, pair[rows]] = 1
    return by_initial, by_pair, initial, pair


def stage_bits(model, tokenizer, text: str, seen: set[str], batch: int = 8) -> dict:
    """The staged view of a model's held-out loss (see the module docstring); `seen` = the training characters."""
    import numpy as np
    import torch

    if (tokenizer.token_counts(text) != 1).any():
        raise UserError("hangul_stages needs one token per character (data.tokenizer=char or hangul)")
    chars = [tokenizer.decode([i]) for i in range(tokenizer.vocab_size)]
    by_initial, by_pair, initial, pair = syllable_tables(chars)
    scored = torch.tensor([c in seen for c in chars])
    ids = torch.from_numpy(tokenizer.encode(text, normalized=True).astype(np.int64))
    L = model.context_length
    starts = list(range(0, len(ids) - L - 1, L))
    sums = dict.fromkeys(("initial", "medial", "final", "other"), 0.0)
    counts = {"syllables": 0, "others": 0}
    model.eval()
    with torch.inference_mode():
        for k in range(0, len(starts), batch):
            w = torch.stack([ids[s : s + L + 1] for s in starts[k : k + batch]])
            out, _ = model(w[:, :-1])
            logp = torch.log_softmax(out.double(), dim=-1)  # a no-op on the staged head's log-probabilities
            p = logp.exp()
            log_initial, log_pair = (p @ by_initial).log(), (p @ by_pair).log()  # (B, T, 19), (B, T, 399)
            t = w[:, 1:]
            target = logp.gather(-1, t[..., None])[..., 0]
            ok = scored[t]
            syl = ok & (initial[t] >= 0)
            li = log_initial.gather(-1, initial[t].clamp(min=0)[..., None])[..., 0]
            lp = log_pair.gather(-1, pair[t].clamp(min=0)[..., None])[..., 0]
            sums["initial"] -= li[syl].sum().item()
            sums["medial"] -= (lp - li)[syl].sum().item()
            sums["final"] -= (target - lp)[syl].sum().item()
            sums["other"] -= target[ok & ~syl].sum().item()
            counts["syllables"] += int(syl.sum())
            counts["others"] += int((ok & ~syl).sum())
    n_syl, n_other = max(counts["syllables"], 1), max(counts["others"], 1)
    bits = {f"bits_{k}": v / (n_other if k == "other" else n_syl) / math.log(2) for k, v in sums.items()}
    bits["bpc"] = sum(sums.values()) / max(n_syl + counts["others"], 1) / math.log(2)
    return {k: round(v, 4) for k, v in bits.items()} | counts


def main(argv: list[str]) -> None:
    import torch

    from data.text import iter_text_chunks
    from inference.loading import load_run

    args = parse_args(argv)
    text = "".join(iter_text_chunks(Path(args.text)))[: args.chars]
    seen = set("".join(iter_text_chunks(Path(args.train))))
    for run_dir in args.runs:
        run = load_run(Path(run_dir), torch.device("cpu"))
        opt.print_json({"run": run_dir, **stage_bits(run.model, run.tokenizer, text, seen)})


if __name__ == "__main__":
    opt.run_script(main)
