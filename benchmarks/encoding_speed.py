"""Tokenizer speed: `KoreanCharTokenizer.encode` against a per-character Python loop.

Design choices:
- The loop is what a first version would write (a dict lookup per character, then `torch.tensor`): the speed-up
  says whether vectorising was worth it; int64 ids match its dtype, `normalized=True` is the corpus path.
- The table's first build is timed apart; each number is a mean of a few calls, so no side pays for what ran before.
"""

from __future__ import annotations

import time

import torch

from benchmarks.timing import mean_seconds, median_alternating
from tokenizer import KoreanCharTokenizer

REPS = 5


def bench_encoding(text: str, rounds: int) -> dict:
    """Seconds and characters/s of encoding `text`, and the speed-ups over the Python loop."""
    tok = KoreanCharTokenizer.from_text(text)
    stoi = {c: i + 1 for i, c in enumerate(tok.chars)}
    start = time.perf_counter()
    tok.encode("가")
    first_call = time.perf_counter() - start

    secs = median_alternating(
        {
            "loop": mean_seconds(lambda: torch.tensor([stoi.get(c, 0) for c in text], dtype=torch.long), REPS),
            "numpy": mean_seconds(lambda: torch.from_numpy(tok.encode(text)), REPS),
            "numpy64": mean_seconds(lambda: torch.from_numpy(tok.encode(text)).long(), REPS),
            "numpy_nfc": mean_seconds(lambda: torch.from_numpy(tok.encode(text, normalized=True)), REPS),
        },
        rounds,
    )
    return {
        "encode_chars": len(text),
        "encode_seconds": round(secs["numpy"], 5),
        "encode_chars_per_sec": round(len(text) / secs["numpy"]),
        "encode_python_loop_chars_per_sec": round(len(text) / secs["loop"]),
        "encode_speedup_over_python_loop": round(secs["loop"] / secs["numpy"], 1),
        "encode_speedup_over_python_loop_int64": round(secs["loop"] / secs["numpy64"], 1),
        "encode_table_build_seconds_once_per_process": round(first_call, 3),
        "encode_seconds_prenormalized": round(secs["numpy_nfc"], 5),
        "encode_speedup_over_python_loop_prenormalized": round(secs["loop"] / secs["numpy_nfc"], 1),
    }
