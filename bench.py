"""Speed benchmark: prints one JSON object (tokens/s, ratios, memory, FLOP/s).

    python bench.py                      # the default config on this machine's default device
    python bench.py --device cuda --preset shakespeare --dtype bfloat16
    python bench.py --quick              # fewer rounds, no 100 MB memory test

Timings alternate the compared sides over several rounds and report medians.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from data.corpus import EMBEDDED_CORPUS
from data.text import read_text
from model import AttentionLanguageModel
from model.decode import DecodeStep
from tokenizer import KoreanCharTokenizer
from common.device import autocast, enable_fast_matmul, pick_device

ROOT = Path(__file__).resolve().parent
SHARED_CORPUS = ROOT.parent / "shared" / "corpora" / "koconovel_dev.txt"
PRESETS = {
    # the stated default: the test corpus's vocabulary, fp32, CPU
    "default": dict(context_length=128, embedding_size=128, head_size=128, num_heads=4, num_blocks=4, batch=32),
    # nanoGPT's shakespeare-char size
    "shakespeare": dict(context_length=256, embedding_size=384, head_size=384, num_heads=6, num_blocks=6, batch=64),
}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_alternating(fns: dict, rounds: int) -> dict[str, float]:
    """Run each timing function once per round, alternating sides; median of each side's results."""
    results: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            results[name].append(fn())
    return {k: statistics.median(v) for k, v in results.items()}


def matmul_peak_flops(device: torch.device, dtype: torch.dtype, rounds: int) -> float:
    n = 4096 if device.type == "cuda" else 1024
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    reps = 50 if device.type == "cuda" else 10
    for _ in range(3):
        a @ b
    best = []
    for _ in range(rounds):
        sync(device)
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        sync(device)
        best.append(2 * n**3 * reps / (time.perf_counter() - t))
    return statistics.median(best)


def training_timer(model, opt, batch, context, vocab, device, dtype, steps):
    x = torch.randint(0, vocab, (batch, context), device=device)
    y = torch.randint(0, vocab, (batch, context), device=device)

    def step():
        with autocast(device, dtype):
            _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()

    def timed() -> float:
        sync(device)
        t = time.perf_counter()
        for _ in range(steps):
            step()
        sync(device)
        return batch * context * steps / (time.perf_counter() - t)

    return timed


def bench_training(cfg: dict, vocab: int, device: torch.device, dtypes: list[str], rounds: int, steps: int) -> dict:
    mcfg = {k: v for k, v in cfg.items() if k != "batch"}
    timers, model = {}, None
    for attention in ("heads", "fused"):
        for dt in dtypes:
            torch.manual_seed(0)
            model = AttentionLanguageModel(vocab_size=vocab, dropout=0.0, attention=attention, **mcfg).to(device)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type in ("cuda", "cpu"))
            timers[f"{attention}_{dt}"] = training_timer(model, opt, cfg["batch"], cfg["context_length"], vocab,
                                                         device, getattr(torch, dt), steps)
    tps = median_alternating(timers, rounds)
    out = {f"train_tokens_per_sec_{k}": round(v, 1) for k, v in tps.items()}
    base = tps["heads_float32"] if "heads_float32" in tps else tps[f"heads_{dtypes[0]}"]
    for dt in dtypes:
        out[f"fused_over_heads_{dt}"] = round(tps[f"fused_{dt}"] / tps[f"heads_{dt}"], 3)
        out[f"fused_{dt}_over_heads_float32"] = round(tps[f"fused_{dt}"] / base, 3)
    flops_per_token = model.flops_per_token()
    out["model_params"] = model.num_parameters()
    out["model_flops_per_token"] = flops_per_token
    out["_tps"] = tps
    return out


def bench_generation(cfg: dict, vocab: int, device: torch.device, rounds: int, new_tokens: int) -> dict:
    mcfg = {k: v for k, v in cfg.items() if k != "batch"}
    torch.manual_seed(0)
    model = AttentionLanguageModel(vocab_size=vocab, **mcfg).to(device).eval()
    prompt = torch.randint(0, vocab, (1, 8), device=device)

    def timer(use_cache: bool, window_shift: int | None = None):
        def timed() -> float:
            g = torch.Generator(device=device).manual_seed(0)
            sync(device)
            t = time.perf_counter()
            for _ in model.stream(prompt, new_tokens, temperature=1.0, use_cache=use_cache, generator=g,
                                  window_shift=window_shift):
                pass
            sync(device)
            return new_tokens / (time.perf_counter() - t)

        timed()  # warm-up
        return timed

    # "uncached" reads the same windows as the cached path (hence the same logits); "crop_every_step" is
    # nanoGPT's uncached loop, which re-reads the last context_length tokens at every step (more work).
    tps = median_alternating({"cached": timer(True), "uncached": timer(False),
                              "crop_every_step": timer(False, window_shift=1)}, rounds)
    return {"generate_new_tokens": new_tokens, "generate_tokens_per_sec_cached": round(tps["cached"], 1),
            "generate_tokens_per_sec_uncached": round(tps["uncached"], 1),
            "generate_cached_over_uncached": round(tps["cached"] / tps["uncached"], 2),
            "generate_tokens_per_sec_uncached_crop_every_step": round(tps["crop_every_step"], 1),
            "generate_cached_over_uncached_crop_every_step": round(tps["cached"] / tps["crop_every_step"], 2),
            **decode_breakdown(model, vocab, device)}


@torch.inference_mode()
def decode_breakdown(model: AttentionLanguageModel, vocab: int, device: torch.device) -> dict:
    """Where a cached token's time goes: the one-token step, and refilling the cache when the window jumps."""
    C = model.context_length
    shift = model.window_shift
    ids = torch.randint(0, vocab, (1, C), device=device)
    cache = model.new_cache(1, device)
    step = DecodeStep(model, cache)
    steps, refills, full = [], [], []
    for _ in range(5):
        sync(device)
        t = time.perf_counter()
        model(ids[:, : C - shift], kv_cache=cache, start=0, last_only=True)
        sync(device)
        refills.append(time.perf_counter() - t)
        for p in range(C - shift, C):
            t = time.perf_counter()
            step(ids[:, p : p + 1], cache, p)
            sync(device)
            steps.append(time.perf_counter() - t)
        t = time.perf_counter()
        model(ids, last_only=True)
        sync(device)
        full.append(time.perf_counter() - t)
    return {"generate_decode_step_us": round(statistics.median(steps) * 1e6, 1),
            "generate_refill_us_per_token": round(statistics.median(refills) / shift * 1e6, 1),
            "generate_uncached_full_window_us": round(statistics.median(full) * 1e6, 1)}


def bench_encoding(text: str, rounds: int) -> dict:
    tok = KoreanCharTokenizer.from_text(text)
    stoi = {c: i + 1 for i, c in enumerate(tok.chars)}
    t = time.perf_counter()
    tok.encode("가")  # the first NFC-checking encode in a process builds its table once (reported apart)
    first_call = time.perf_counter() - t

    reps = 5  # each measurement is the mean of a few calls, so no side pays alone for the one before it

    def timed(fn: Callable[[], object]) -> Callable[[], float]:
        def run() -> float:
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            return (time.perf_counter() - t) / reps

        return run

    loop = timed(lambda: torch.tensor([stoi.get(c, 0) for c in text], dtype=torch.long))
    vectorised = timed(lambda: torch.from_numpy(tok.encode(text)))  # int32 ids: what nn.Embedding takes
    vectorised_int64 = timed(lambda: torch.from_numpy(tok.encode(text)).long())  # the loop's dtype
    # the corpus path: data.text has made the text NFC already
    vectorised_prenormalized = timed(lambda: torch.from_numpy(tok.encode(text, normalized=True)))

    secs = median_alternating({"loop": loop, "numpy": vectorised, "numpy64": vectorised_int64,
                               "numpy_nfc": vectorised_prenormalized}, rounds)
    return {"encode_chars": len(text), "encode_seconds": round(secs["numpy"], 5),
            "encode_chars_per_sec": round(len(text) / secs["numpy"]),
            "encode_python_loop_chars_per_sec": round(len(text) / secs["loop"]),
            "encode_speedup_over_python_loop": round(secs["loop"] / secs["numpy"], 1),
            "encode_speedup_over_python_loop_int64": round(secs["loop"] / secs["numpy64"], 1),
            "encode_table_build_seconds_once_per_process": round(first_call, 3),
            "encode_seconds_prenormalized": round(secs["numpy_nfc"], 5),
            "encode_speedup_over_python_loop_prenormalized": round(secs["loop"] / secs["numpy_nfc"], 1)}


def bench_big_corpus_memory(megabytes: int) -> dict:
    """Train a few steps on a synthetic corpus of `megabytes` MB in a child process; report its peak RSS."""
    rng = np.random.default_rng(0)
    syllables = np.arange(0xAC00, 0xAC00 + 2350, dtype=np.uint32)  # a common-syllable-sized alphabet
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "synthetic.txt"
        with path.open("w", encoding="utf-8") as f:
            written = 0
            while written < megabytes * 2**20:
                cps = rng.choice(syllables, size=1 << 20)
                cps[rng.random(cps.size) < 0.2] = ord(" ")
                cps[rng.random(cps.size) < 0.01] = ord("\n")
                chunk = cps.astype("<u4").tobytes().decode("utf-32-le")
                f.write(chunk)
                written += len(chunk.encode("utf-8"))
        cmd = [sys.executable, str(ROOT / "train.py"), f"data.path={path}", f"data.cache_dir={tmp}/cache",
               "train.max_steps=20", "train.eval_interval=20", "train.eval_steps=2", "train.sample_chars=0",
               f"hydra.run.dir={tmp}/run", "device=cpu"]
        t = time.perf_counter()
        peak_kb, err = child_peak_rss_kb(cmd)
        if err:
            raise RuntimeError(err[-2000:])
        return {"big_corpus_mb": round(path.stat().st_size / 2**20, 1),
                "big_corpus_train_seconds": round(time.perf_counter() - t, 1),
                "big_corpus_peak_rss_mb": round(peak_kb / 1024, 1)}


def child_peak_rss_kb(cmd: list[str]) -> tuple[int, str]:
    """Run `cmd`; return its own peak resident memory in KiB and its stderr if it failed.

    getrusage(RUSAGE_CHILDREN) would count this (large) process's memory too, since a forked child starts
    as a copy of it; /proc/<pid>/status VmHWM is the child's own high-water mark after exec.
    """
    with tempfile.TemporaryFile("w+") as errors:  # a file, not a pipe: a chatty child never blocks
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errors, text=True)
        status, peak = Path(f"/proc/{proc.pid}/status"), 0
        while proc.poll() is None:
            try:
                for line in status.read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        errors.seek(0)
        err = errors.read()
    if not status.parent.exists() and peak == 0:  # no /proc (macOS): fall back to rusage
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return peak, err if proc.returncode else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--preset", choices=sorted(PRESETS), default=None,
                    help="model size (default: 'default' on CPU, both on CUDA)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5, help="training steps per timed round")
    ap.add_argument("--new-tokens", type=int, default=500)
    ap.add_argument("--memory-mb", type=int, default=100, help="synthetic corpus size for the memory test (0 = off)")
    ap.add_argument("--quick", action="store_true", help="2 rounds, no memory test")
    ap.add_argument("--vocab-size", type=int, default=None,
                    help="model vocabulary (default: that of ../shared's test corpus, else the embedded one)")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.memory_mb = 2, 0

    device = pick_device(args.device)
    enable_fast_matmul(device)
    text = read_text(SHARED_CORPUS if SHARED_CORPUS.exists() else EMBEDDED_CORPUS)
    vocab = args.vocab_size or KoreanCharTokenizer.from_text(text).vocab_size
    bf16_ok = device.type == "cuda" and torch.cuda.is_bf16_supported() or device.type == "cpu"
    dtypes = ["float32"] + (["bfloat16"] if bf16_ok else [])
    presets = [args.preset] if args.preset else (["default", "shakespeare"] if device.type == "cuda" else ["default"])

    result = {"device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
              else f"cpu ({torch.get_num_threads()} threads)", "torch": torch.__version__, "vocab_size": vocab,
              "corpus": "koconovel_dev" if SHARED_CORPUS.exists() else "embedded"}
    peak = matmul_peak_flops(device, torch.float32, args.rounds)
    result["matmul_peak_flops_float32"] = round(peak)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for preset in presets:
        cfg = PRESETS[preset]
        r = bench_training(cfg, vocab, device, dtypes, args.rounds, args.steps)
        tps = r.pop("_tps")
        r["achieved_flops_fused_float32"] = round(tps["fused_float32"] * r["model_flops_per_token"])
        r["achieved_fraction_of_matmul_peak_float32"] = round(r["achieved_flops_fused_float32"] / peak, 3)
        result[preset] = {"config": cfg, **r}
    result.update(bench_generation(PRESETS["default"], vocab, device, args.rounds, args.new_tokens))
    result.update(bench_encoding(text, args.rounds))
    if args.memory_mb:
        result.update(bench_big_corpus_memory(args.memory_mb))
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    if device.type == "cuda":
        result["peak_cuda_memory_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
