"""bench.py and benchmarks/time_budget.py: bad values end in one `error:` line, and a smoke run prints every key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.options import parse_options
from common.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")

TOP_KEYS = {
    "device",
    "device_name",
    "torch",
    "vocab_size",
    "corpus",
    "matmul_peak_flops_float32",
    "generate_new_tokens",
    "generate_tokens_per_sec_cached",
    "generate_tokens_per_sec_uncached",
    "generate_cached_over_uncached",
    "generate_tokens_per_sec_uncached_crop_every_step",
    "generate_cached_over_uncached_crop_every_step",
    "generate_decode_step_us",
    "generate_refill_us_per_token",
    "generate_uncached_full_window_us",
    "encode_chars",
    "encode_seconds",
    "encode_chars_per_sec",
    "encode_python_loop_chars_per_sec",
    "encode_speedup_over_python_loop",
    "encode_speedup_over_python_loop_int64",
    "encode_table_build_seconds_once_per_process",
    "encode_seconds_prenormalized",
    "encode_speedup_over_python_loop_prenormalized",
    "peak_rss_mb",
    "generation",
    "hangul",
}
HANGUL_KEYS = {
    "config",
    "dtype",
    "vocab_size_char",
    "vocab_size_hangul",
    "train_tokens_per_sec_char",
    "train_tokens_per_sec_hangul",
    "train_hangul_over_char",
    "target_hangul_over_char",
    "generate_tokens_per_sec_char",
    "generate_tokens_per_sec_hangul",
    "generate_hangul_over_char",
    "generate_new_tokens",
    "train_tokens_per_sec_hangul_all_rows",
    "train_hangul_all_rows_over_char",
}
MEMORY_KEYS = {"big_corpus_mb", "big_corpus_train_seconds", "big_corpus_peak_rss_mb"}


def preset_keys(dtypes: list[str]) -> set[str]:
    keys = {
        "config",
        "model_params",
        "model_flops_per_token",
        "achieved_flops_fused_float32",
        "achieved_fraction_of_matmul_peak_float32",
        "train_tokens_per_sec_fused_float32_ema",
        "ema_over_plain_float32",
    }
    for dt in dtypes:
        keys |= {
            f"train_tokens_per_sec_heads_{dt}",
            f"train_tokens_per_sec_fused_{dt}",
            f"fused_over_heads_{dt}",
            f"fused_{dt}_over_heads_float32",
        }
    return keys


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("KOCHAR_DEBUG", "HYDRA_FULL_ERROR")}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")  # tiny models: more threads only contend
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def assert_one_error_line(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--device", "nonsense"], "--device nonsense"),
        (["--device", "cuda:x"], "--device cuda:x"),
        (["--dtype", "float64"], "--dtype float64"),
        (["--preset", "nope"], "--preset nope"),
        (["--rounds", "abc"], "--rounds"),
        (["--steps", "1.5"], "--steps"),
        (["--new-tokens", "many"], "--new-tokens"),
        (["--steps", "-1"], "--steps=-1 is invalid: it must be a positive integer"),
        (["--rounds", "0"], "--rounds=0 is invalid: it must be a positive integer"),
        (["--memory-mb", "-5"], "--memory-mb=-5 is invalid: it must be an integer >= 0"),
        (["--vocab-size", "0"], "--vocab-size=0 is invalid: it must be a positive integer"),
        (["--corpus", "/no/such/corpus.txt"], "not found"),
        (["--corpus", "."], "a directory"),
        (["--rounds"], "expected one argument"),
        (["--no-such-flag"], "unrecognized arguments"),
        (["surplus"], "unrecognized arguments"),
        pytest.param(["--device", "cuda"], "no CUDA GPU", marks=NO_GPU),
        (["--device", "cpu", "--dtype", "float16"], "not supported on the CPU"),
    ],
)
def test_bad_bench_value_is_one_error_line(args, fragment):
    assert_one_error_line(run("bench.py", *args), fragment)


def test_bench_empty_or_binary_corpus_is_one_error_line(tmp_path):
    empty, binary = tmp_path / "empty.txt", tmp_path / "binary.bin"
    empty.write_text("")
    binary.write_bytes(bytes(range(256)) * 4)
    assert_one_error_line(run("bench.py", "--smoke", "--device", "cpu", "--corpus", str(empty)), "empty")
    assert_one_error_line(run("bench.py", "--smoke", "--device", "cpu", "--corpus", str(binary)))


@pytest.mark.parametrize("script", [["benchmarks/time_budget.py"], ["-m", "benchmarks.time_budget"]])
def test_bad_time_budget_value_is_one_error_line(script, small_corpus):
    corpus = ["--corpus", str(small_corpus)]
    assert_one_error_line(run(*script, "--corpus", "/no/such.txt", "--run", "a="), "--corpus")
    assert_one_error_line(run(*script, *corpus, "--seconds", "soon", "--run", "a="), "--seconds")
    assert_one_error_line(
        run(*script, *corpus, "--seconds", "-3", "--run", "a="),
        "--seconds=-3 is invalid: it must be a finite number > 0",
    )
    assert_one_error_line(run(*script, *corpus, "--run", "=model=tiny"), "NAME=OVERRIDES")
    assert_one_error_line(run(*script, *corpus), "--run")


def test_help_works_from_any_directory(tmp_path):
    for script in ("bench.py", "benchmarks/time_budget.py"):
        proc = subprocess.run(
            [sys.executable, str(ROOT / script), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr


def test_quick_and_smoke_only_change_defaults():
    quick = parse_options(["--quick"])
    assert (quick.rounds, quick.memory_mb) == (2, 0)
    assert parse_options(["--quick", "--rounds", "4"]).rounds == 4
    smoke = parse_options(["--smoke"])
    assert (smoke.preset, smoke.rounds, smoke.memory_mb, smoke.corpus) == ("tiny", 1, 0, None)
    assert parse_options(["--smoke", "--preset", "default"]).preset == "default"
    with pytest.raises(UserError, match="--rounds"):
        parse_options(["--rounds", "x"])


@pytest.fixture(scope="module")
def smoke_result() -> dict:
    """One `--smoke` run shared by the tests that read its output (each run takes tens of seconds)."""
    proc = run("bench.py", "--smoke", "--device", "cpu", timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_smoke_run_prints_every_key(smoke_result):
    result = smoke_result
    assert set(result) == TOP_KEYS | {"tiny"}
    assert set(result["tiny"]) == preset_keys(["float32", "bfloat16"])
    assert result["corpus"] == "embedded" and result["generate_new_tokens"] == 16


def test_smoke_run_has_the_hangul_section(smoke_result):
    hangul = smoke_result["hangul"]
    assert set(hangul) == HANGUL_KEYS
    assert hangul["config"]["embedding_size"] == 32 and hangul["generate_new_tokens"] == 16  # the tiny preset
    assert hangul["vocab_size_hangul"] > 11172 > hangul["vocab_size_char"]
    for side in ("char", "hangul"):
        assert hangul[f"train_tokens_per_sec_{side}"] > 0 and hangul[f"generate_tokens_per_sec_{side}"] > 0
    assert hangul["train_tokens_per_sec_hangul_all_rows"] > 0
    ratio = hangul["train_tokens_per_sec_hangul"] / hangul["train_tokens_per_sec_char"]
    assert hangul["train_hangul_over_char"] == pytest.approx(ratio, abs=2e-3)


@pytest.mark.slow
def test_float32_only_with_the_memory_benchmark():
    proc = run("bench.py", "--smoke", "--device", "cpu", "--dtype", "float32", "--memory-mb", "1", timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) == TOP_KEYS | MEMORY_KEYS | {"tiny"}
    assert set(result["tiny"]) == preset_keys(["float32"])
    assert result["big_corpus_mb"] >= 1 and result["big_corpus_peak_rss_mb"] > 0


def test_lever_speed_times_each_lever_as_train_py_steps_it(small_corpus):
    r = run(
        "-m",
        "benchmarks.lever_speed",
        "--corpus",
        str(small_corpus),
        "--rounds",
        "1",
        "--steps",
        "1",
        "--only",
        "modern+mtp,modern+ema",
        "--set",
        "model=tiny",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout[r.stdout.index("{") :])
    assert set(out["tokens_per_sec"]) >= {"modern+mtp", "modern+ema"}
    assert set(out["over_modern"]) == {"modern+mtp", "modern+ema"} and all(v > 0 for v in out["over_modern"].values())
    assert_one_error_line(run("-m", "benchmarks.lever_speed", "--only", "modern+nope"), "--only")
