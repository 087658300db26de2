"""Running the speed benchmark: the device and precisions to measure, then one JSON-ready dict.

Design choices:
- The checks that need torch (a GPU, bf16) come before any measurement: a bad flag costs seconds.
- One flat dict per measurement family in a fixed order: docs/en/speed.md and scripts read its keys.
- The vocabulary defaults to the corpus's, so the output layer has the size a model trained on it would.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.encoding_speed import bench_encoding
from benchmarks.generation_speed import bench_cache_against_crop, bench_generation, bench_gpu_sampling
from benchmarks.hangul_speed import bench_hangul
from benchmarks.memory import bench_big_corpus_memory, own_peak_rss_mb
from benchmarks.options import SHARED_CORPUS
from benchmarks.timing import PRESETS
from benchmarks.training_speed import bench_training, matmul_peak_flops
from common.device import enable_fast_matmul, pick_device, resolve_dtype
from common.errors import UserError
from data.corpus import EMBEDDED_CORPUS
from data.text import read_text
from tokenizer import KoreanCharTokenizer


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
    if device.type == "cuda":  # batch-1 sampling replayed as a CUDA graph, against eager (benchmarks/graph_sampling.py)
        result["gpu_sampling"] = bench_gpu_sampling(generation_preset, vocab, device, opts.rounds, opts.new_tokens)
    if opts.generation_only:
        result["generation"] = bench_cache_against_crop(generation_preset, vocab, device, opts.rounds, opts.new_tokens)
        if device.type == "cpu":
            from benchmarks.transformers_peer import bench_transformers_peer

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
