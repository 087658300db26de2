"""Running the speed benchmark: the device and precisions to measure, then one JSON-ready dict.

Design choices:
- The checks that need torch (a GPU, bf16) come before any measurement: a bad flag costs seconds.
- One flat dict per measurement family in a fixed order: docs/en/speed.md and scripts read its keys.
- Training: every (attention, dtype) pair has its own seeded model and optimizer, built before any timing, so pairs
  take turns, on random ids (a step's speed does not depend on the text, and no data pipeline is timed by accident);
  float32 is always measured, the baseline of every ratio; the peak is a large matmul's in this run, not a datasheet's.
- The vocabulary defaults to the corpus's, so the output layer has the size a model trained on it would.
- Peak memory: the large-corpus run is its own `train.py` process, so its peak is real training's, not this
  benchmark's; its peak is VmHWM from /proc while it runs (RUSAGE_CHILDREN also counts pages a forked child shares;
  fallback: macOS). The corpus is written in chunks, so this process never holds it; the child's stderr goes to a
  file, never blocking.
- Encoding is timed against what a first version would write (a dict lookup per character, then `torch.tensor`): the
  speed-up says whether vectorising was worth it; int64 ids match its dtype, `normalized=True` is the corpus path. The
  table's first build is timed apart; each number is a mean of a few calls, so no side pays for what ran before.
- The hangul section sets `char` against `hangul` with jamo input and the staged head: the sides differ only in the
  Hangul-aware parts (same size, batch, float32), so the ratio is their price. The hangul side holds only the syllable
  rows the corpus reaches, as training does; `hangul_all_rows` holds all 11,172.
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.generation_speed import (
    PROMPT_TOKENS,
    bench_cache_against_crop,
    bench_generation,
    bench_gpu_sampling,
    bench_transformers_peer,
    generation_timer,
)
from benchmarks.options import ROOT, SHARED_CORPUS
from benchmarks.timing import (
    PRESETS,
    mean_seconds,
    median_alternating,
    per_second,
    repeated,
    seeded_model,
    training_timer,
)
from common.device import enable_fast_matmul, pick_device, resolve_dtype
from common.errors import UserError
from data.corpus import EMBEDDED_CORPUS
from data.text import read_text
from model.counts import flops_per_token, num_parameters
from model.hangul.held_rows import compact_syllable_rows
from tokenizer import KoreanCharTokenizer, build_tokenizer
from tokenizer.jamo import SYLLABLE_FIRST

ENCODE_REPS = 5
HANGUL_TARGET_RATIO = 0.9
HANGUL = dict(embedding="jamo", head="jamo")
HANGUL_SIDES = {"char": {}, "hangul": HANGUL, "hangul_all_rows": HANGUL}
SYNTHETIC_SYLLABLES = 2350  # as many syllables as the KS X 1001 common set has (the first ones in code-point order)
SYNTHETIC_CHUNK_CHARS = 1 << 20
BIG_CORPUS_OVERRIDES = (
    "train.max_steps=20",
    "train.eval_interval=20",
    "train.eval_steps=2",
    "train.sample_chars=0",
    "device=cpu",
)


def resolve_device(name: str) -> torch.device:
    """`pick_device`, with its messages phrased in this script's flags and CUDA indices checked."""
    try:
        device = pick_device(name)
    except UserError as e:
        raise UserError(str(e).replace("device=", "--device ")) from None
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UserError(
            f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s), numbered from 0"
        )
    return device


def dtypes_to_measure(name: str, device: torch.device) -> list[str]:
    """float32 (always: the baseline of the ratios) plus the precision `--dtype` asks for."""
    bf16 = device.type == "cpu" or (device.type == "cuda" and torch.cuda.is_bf16_supported())
    if name == "auto" and device.type == "cuda":  # the precision train.py's auto chooses for this card
        chosen = {torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(resolve_dtype("auto", device))
        return ["float32", chosen] if chosen else ["float32"]
    if name == "auto":
        return ["float32", "bfloat16"] if bf16 else ["float32"]
    if name == "bfloat16" and not bf16:
        raise UserError(f"--dtype bfloat16 is not supported on {device}; use --dtype float32 or auto")
    if name == "float16" and device.type == "cpu":
        raise UserError("--dtype float16 is not supported on the CPU; use --dtype bfloat16 or float32")
    return ["float32"] if name == "float32" else ["float32", name]


def corpus_text(opts: argparse.Namespace) -> tuple[str, str]:
    """(the corpus's name for the output, its text)."""
    path = opts.corpus or EMBEDDED_CORPUS
    text = read_text(path)
    if not text:
        raise UserError(f"--corpus {path} is empty; pass a text file with some text in it")
    name = "embedded" if path == EMBEDDED_CORPUS else "koconovel_dev" if path == SHARED_CORPUS else path.stem
    return name, text


def machine(device: torch.device) -> dict:
    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"{device.type} ({torch.get_num_threads()} threads)"
    )
    return {"device": str(device), "device_name": name, "torch": torch.__version__}


def run_benchmarks(opts: argparse.Namespace) -> dict:
    device = resolve_device(opts.device)
    dtypes = dtypes_to_measure(opts.dtype, device)
    enable_fast_matmul(device)
    corpus_name, text = corpus_text(opts)
    vocab = opts.vocab_size or KoreanCharTokenizer.from_text(text).vocab_size
    presets = [opts.preset] if opts.preset else (["default", "shakespeare"] if device.type == "cuda" else ["default"])

    result = {**machine(device), "vocab_size": vocab, "corpus": corpus_name}
    generation_preset = PRESETS["tiny" if opts.smoke else "default"]
    if device.type == "cuda":  # batch-1 sampling replayed as a CUDA graph, against eager (generation_speed.py)
        result["gpu_sampling"] = bench_gpu_sampling(generation_preset, vocab, device, opts.rounds, opts.new_tokens)
    if opts.generation_only:
        result["generation"] = bench_cache_against_crop(generation_preset, vocab, device, opts.rounds, opts.new_tokens)
        if device.type == "cpu":
            result["transformers_peer"] = bench_transformers_peer(
                generation_preset, vocab, opts.rounds, opts.new_tokens
            )
        return result
    peak = matmul_peak_flops(device, torch.float32, opts.rounds, small=opts.smoke)
    result["matmul_peak_flops_float32"] = round(peak)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for preset in presets:
        result[preset] = bench_training(PRESETS[preset], vocab, device, dtypes, opts.rounds, opts.steps, peak)
    result.update(bench_generation(generation_preset, vocab, device, opts.rounds, opts.new_tokens))
    result["generation"] = bench_cache_against_crop(generation_preset, vocab, device, opts.rounds, opts.new_tokens)
    result["hangul"] = bench_hangul(generation_preset, text, device, opts.rounds, opts.steps, opts.new_tokens)
    result.update(bench_encoding(text, opts.rounds))
    if opts.memory_mb:
        result.update(bench_big_corpus_memory(opts.memory_mb))
    result["peak_rss_mb"] = own_peak_rss_mb()
    if device.type == "cuda":
        result["peak_cuda_memory_mb"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return result


def bench_encoding(text: str, rounds: int) -> dict:
    """Seconds and characters/s of encoding `text`, and the speed-ups over the Python loop."""
    tok = KoreanCharTokenizer.from_text(text)
    stoi = {c: i + 1 for i, c in enumerate(tok.chars)}
    start = time.perf_counter()
    tok.encode("가")
    first_call = time.perf_counter() - start

    secs = median_alternating(
        {
            "loop": mean_seconds(lambda: torch.tensor([stoi.get(c, 0) for c in text], dtype=torch.long), ENCODE_REPS),
            "numpy": mean_seconds(lambda: torch.from_numpy(tok.encode(text)), ENCODE_REPS),
            "numpy64": mean_seconds(lambda: torch.from_numpy(tok.encode(text)).long(), ENCODE_REPS),
            "numpy_nfc": mean_seconds(lambda: torch.from_numpy(tok.encode(text, normalized=True)), ENCODE_REPS),
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


def bench_hangul(
    preset: dict[str, int], text: str, device: torch.device, rounds: int, steps: int, new_tokens: int
) -> dict:
    tokenizers = {kind: build_tokenizer(kind, [text]) for kind in ("char", "hangul")}
    ids = {kind: torch.from_numpy(t.encode(text).astype("int64")) for kind, t in tokenizers.items()}
    kind = {side: "char" if side == "char" else "hangul" for side in HANGUL_SIDES}
    vocabs = {side: tokenizers[kind[side]].vocab_size for side in HANGUL_SIDES}
    models = {
        side: seeded_model(vocabs[side], preset, device, dropout=0.0, **options)
        for side, options in HANGUL_SIDES.items()
    }
    compact_syllable_rows(models["hangul"], ids["hangul"].unique())
    train = median_alternating(
        {
            side: training_timer(m, preset["batch"], device, torch.float32, steps, ids[kind[side]])
            for side, m in models.items()
        },
        rounds,
    )
    prompts = {side: torch.randint(0, vocabs[side], (1, PROMPT_TOKENS), device=device) for side in ("char", "hangul")}
    generate = median_alternating(
        {side: generation_timer(models[side].eval(), prompt, new_tokens, True) for side, prompt in prompts.items()},
        rounds,
    )  # hangul_all_rows generates as hangul
    return {
        "config": dict(preset),
        "dtype": "float32",
        **{f"vocab_size_{s}": vocabs[s] for s in ("char", "hangul")},
        **{f"train_tokens_per_sec_{side}": round(v, 1) for side, v in train.items()},
        "train_hangul_over_char": round(train["hangul"] / train["char"], 3),
        "train_hangul_all_rows_over_char": round(train["hangul_all_rows"] / train["char"], 3),
        "target_hangul_over_char": HANGUL_TARGET_RATIO,
        **{f"generate_tokens_per_sec_{side}": round(v, 1) for side, v in generate.items()},
        "generate_hangul_over_char": round(generate["hangul"] / generate["char"], 3),
        "generate_new_tokens": new_tokens,
    }


def matmul_peak_flops(device: torch.device, dtype: torch.dtype, rounds: int, small: bool = False) -> float:
    """Median FLOP/s of repeated n x n matmuls (2 n^3 FLOPs each)."""
    n, reps = (256, 2) if small else (4096, 50) if device.type == "cuda" else (1024, 10)
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    return median_alternating({"mm": per_second(repeated(lambda: a @ b, reps), 2 * n**3 * reps, device)}, rounds)["mm"]


def bench_training(
    preset: dict[str, int],
    vocab: int,
    device: torch.device,
    dtypes: list[str],
    rounds: int,
    steps: int,
    peak_flops: float,
) -> dict:
    """Tokens/s per (attention, dtype), their ratios, the model's size and its achieved fp32 FLOP/s."""
    timers = {}
    for attention in ("heads", "fused"):
        for dt in dtypes:
            model = seeded_model(vocab, preset, device, dropout=0.0, attention=attention)
            timers[f"{attention}_{dt}"] = training_timer(model, preset["batch"], device, getattr(torch, dt), steps)
    model = seeded_model(vocab, preset, device, dropout=0.0)
    timers["fused_float32_ema"] = training_timer(model, preset["batch"], device, torch.float32, steps, average="ema")
    tps = median_alternating(timers, rounds)
    out: dict = {"config": dict(preset), **{f"train_tokens_per_sec_{k}": round(v, 1) for k, v in tps.items()}}
    for dt in dtypes:
        out[f"fused_over_heads_{dt}"] = round(tps[f"fused_{dt}"] / tps[f"heads_{dt}"], 3)
        out[f"fused_{dt}_over_heads_float32"] = round(tps[f"fused_{dt}"] / tps["heads_float32"], 3)
    out["ema_over_plain_float32"] = round(tps["fused_float32_ema"] / tps["fused_float32"], 3)  # train.average's cost
    achieved = tps["fused_float32"] * flops_per_token(model)
    return {
        **out,
        "model_params": num_parameters(model),
        "model_flops_per_token": flops_per_token(model),
        "achieved_flops_fused_float32": round(achieved),
        "achieved_fraction_of_matmul_peak_float32": round(achieved / peak_flops, 3),
    }


def own_peak_rss_mb() -> float:
    """This process's peak resident memory in MB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 1024), 1)


def write_synthetic_corpus(path: Path, megabytes: int, seed: int = 0) -> None:
    """Write at least `megabytes` MB of random Hangul syllables, spaces and newlines to `path` (UTF-8)."""
    rng = np.random.default_rng(seed)
    syllables = np.arange(SYLLABLE_FIRST, SYLLABLE_FIRST + SYNTHETIC_SYLLABLES, dtype=np.uint32)
    written = 0
    with path.open("w", encoding="utf-8") as f:
        while written < megabytes * 2**20:
            cps = rng.choice(syllables, size=SYNTHETIC_CHUNK_CHARS)
            cps[rng.random(cps.size) < 0.2] = ord(" ")
            cps[rng.random(cps.size) < 0.01] = ord("\n")
            chunk = cps.astype("<u4").tobytes().decode("utf-32-le")
            f.write(chunk)
            written += len(chunk.encode("utf-8"))


def vm_hwm_kb(pid: int) -> int | None:
    """A process's peak resident memory in KiB, from /proc/<pid>/status (None without /proc, or once it is gone)."""
    try:
        found = re.search(r"^VmHWM:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    except OSError:
        return None
    return int(found.group(1)) if found else None


def child_peak_rss_kb(cmd: list[str]) -> tuple[int, str]:
    """Run `cmd`; return its own peak resident memory in KiB, and its stderr if it failed (else "")."""
    with tempfile.TemporaryFile("w+") as errors:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errors, text=True)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, vm_hwm_kb(proc.pid) or 0)  # None: the process ended between poll() and the read
            time.sleep(0.02)
        errors.seek(0)
        err = errors.read()
    if peak == 0 and not Path(f"/proc/{proc.pid}").exists():
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        peak //= 1024 if sys.platform == "darwin" else 1
    return peak, err if proc.returncode else ""


def bench_big_corpus_memory(megabytes: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "synthetic.txt"
        write_synthetic_corpus(path, megabytes)
        cmd = [
            sys.executable,
            str(ROOT / "train.py"),
            f"data.path={path}",
            f"data.cache_dir={tmp}/cache",
            f"hydra.run.dir={tmp}/run",
            *BIG_CORPUS_OVERRIDES,
        ]
        start = time.perf_counter()
        peak_kb, err = child_peak_rss_kb(cmd)
        if err:
            raise RuntimeError("train.py failed during the memory benchmark:\n" + err[-2000:])
        return {
            "big_corpus_mb": round(path.stat().st_size / 2**20, 1),
            "big_corpus_train_seconds": round(time.perf_counter() - start, 1),
            "big_corpus_peak_rss_mb": round(peak_kb / 1024, 1),
        }
