"""A real peer for our sampler: `transformers`' cached `generate` on the very same weights.

Design choices:
- The lecture model, randomly initialised, exported by `export.py`'s code, loaded by `transformers`: the same weights.
- Both sample the full distribution at temperature 1 (its default `top_k` of 50 off) with their KV caches, at most
  `context_length - 1` new tokens (GPT-2's positions stop there), at the default thread count and at one.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from benchmarks.generation_speed import generation_timer
from benchmarks.timing import median_alternating, per_second, seeded_model
from model import AttentionLanguageModel
from model.counts import num_parameters

BATCHES = (1, 8)


def _timers(ours: AttentionLanguageModel, theirs, batch: int, new_tokens: int, vocab: int) -> dict:
    prompt = torch.randint(0, vocab, (batch, 1))

    def theirs_run() -> None:
        torch.manual_seed(0)
        theirs.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            use_cache=True,
            pad_token_id=0,
        )

    return {
        "ours": generation_timer(ours, prompt, new_tokens, use_cache=True),  # the same sampling, seeded
        "transformers": per_second(theirs_run, batch * new_tokens, prompt.device),
    }


@torch.inference_mode()
def bench_transformers_peer(preset: dict[str, int], vocab: int, rounds: int, new_tokens: int) -> dict:
    """{threads_N: {batch_B: {ours, transformers, ours_over_transformers}}}, or why it was skipped."""
    try:
        import transformers
    except ImportError:
        return {"skipped": "transformers is not installed (pip install -r requirements-dev.txt)"}
    from hf_export.writer import write_folder
    from inference.checkpoint import Checkpoint
    from tokenizer import KoreanCharTokenizer

    tokenizer = KoreanCharTokenizer([chr(0xAC00 + i) for i in range(vocab - 1)])
    ours = seeded_model(vocab, preset).eval()
    ckpt = Checkpoint(ours.config, ours.state_dict(), tokenizer.to_dict(), 1.0)
    with tempfile.TemporaryDirectory() as tmp:
        write_folder(ckpt, tokenizer, num_parameters(ours), Path(tmp) / "m", "benchmark", overwrite=False)
        theirs = transformers.AutoModelForCausalLM.from_pretrained(str(Path(tmp) / "m")).eval()
    new = min(new_tokens, ours.context_length - 1)
    report: dict = {"class": type(theirs).__name__, "transformers": transformers.__version__, "new_tokens": new}
    default_threads = torch.get_num_threads()
    for threads in dict.fromkeys((default_threads, 1)):
        torch.set_num_threads(threads)
        try:
            row = {}
            for b in BATCHES:
                tps = median_alternating(_timers(ours, theirs, b, new, vocab), rounds)
                row[f"batch_{b}"] = {
                    "ours_tokens_per_sec": round(tps["ours"], 1),
                    "transformers_tokens_per_sec": round(tps["transformers"], 1),
                    "ours_over_transformers": round(tps["ours"] / tps["transformers"], 2),
                }
            report[f"threads_{threads}"] = row
        finally:
            torch.set_num_threads(default_threads)
    return report
