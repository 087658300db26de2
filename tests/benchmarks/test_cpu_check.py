"""`python -m benchmarks.cpu_check` fits its work to the CPU, tested without its minutes of steps and runs: the ways it
times with bf16 instructions and without (KOCHAR_CPU_BF16 forces each path), the estimate it says first, the steps a
round that fill each way's time, and the JSON of what it measured when it is stopped early."""

import json
import os
import signal
import time

import pytest

import benchmarks.cpu_check as cpu_check
from common.device import CPU_BF16_ENV

ALL = ["float32_eager", "float32_compiled", "bfloat16_eager", "bfloat16_compiled"]


@pytest.mark.parametrize("flag", ["1", "0"], ids=["bf16_cpu", "emulating_cpu"])
def test_bf16_is_compiled_only_on_a_cpu_with_bf16_instructions_and_either_fits_five_minutes(monkeypatch, flag):
    monkeypatch.setenv(CPU_BF16_ENV, flag)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    bf16, ways, estimate = cpu_check.plan(60)
    assert bf16 is (flag == "1")
    assert ways == (ALL if bf16 else ALL[:3])  # emulated bf16 is timed eagerly, never compiled
    assert 3 * 60 < estimate <= 5 * 60
    assert cpu_check.plan(180)[2] == estimate + 2 * 120  # two runs of --seconds each
    monkeypatch.setattr(os, "getloadavg", lambda: (4.0 * (os.cpu_count() or 1), 0.0, 0.0))  # four waiting a core
    assert cpu_check.plan(60)[2] > estimate + 3 * 40  # set-ups and compiles take four times as long


def _fake_steps(monkeypatch, built: list) -> None:
    """train.py's steps stood in for: 10 ms in float32, 20 ms in bf16; the first compiled step compiles for 0.3 s,
    and a moment's load slows the third step to 0.2 s."""

    def ours_step(overrides, way, folder):
        cost, calls = (0.02 if "train.dtype=bfloat16" in overrides else 0.01), []
        built.append(way.inductor)

        def step():
            calls.append(1)
            time.sleep(0.3 if way.inductor and len(calls) == 1 else 0.2 if len(calls) == 3 else cost)

        return step, None

    monkeypatch.setattr(cpu_check, "ours_step", ours_step)


def test_each_way_times_as_many_steps_a_round_as_fill_its_share(monkeypatch, tmp_path):
    built: list = []
    _fake_steps(monkeypatch, built)
    monkeypatch.setattr(cpu_check, "TIMED_S", 0.4)  # over 2 rounds: 0.2 s a round, 20 steps of 10 ms or 10 of 20 ms
    out: dict = {}
    cpu_check.steps(tmp_path / "corpus.txt", 2, ALL[:3], out)
    assert built == [False, True, False]
    assert out["warmup_s"].keys() == {"float32_compiled"} and out["warmup_s"]["float32_compiled"] >= 0.3
    n = out["steps_per_round"]
    assert 10 <= n["float32_eager"] <= 20 and 10 <= n["float32_compiled"] <= 20 and 5 <= n["bfloat16_eager"] <= 10
    assert n["bfloat16_eager"] < min(n["float32_eager"], n["float32_compiled"])
    assert out["best"] != "bfloat16_eager" and out["ms_per_step"]["bfloat16_eager"] >= 20


def test_it_says_first_how_long_it_will_take_and_prints_one_json_object_last(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv(CPU_BF16_ENV, "0")
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    _fake_steps(monkeypatch, [])
    monkeypatch.setattr(cpu_check, "TIMED_S", 0.1)
    monkeypatch.setattr(cpu_check, "runs", lambda corpus, seconds, best, out: out.update(auto={"steps": 9}))
    cpu_check.main(["--seconds", "60", "--rounds", "2"])
    captured = capsys.readouterr()
    err = [line for line in captured.err.splitlines() if line.startswith("cpu_check: ")]
    assert err[0] == (
        "cpu_check: about 4 minutes here: the default step float32_eager, float32_compiled, bfloat16_eager (no bf16 "
        "instructions: bf16 is emulated here, so it is not compiled), then two 60-s runs of train.py"
    )
    assert err[-1].startswith("cpu_check: steps timed after ") and err[-1].endswith("; two runs next")
    result = json.loads(captured.out)
    assert result["plan"] == {"ways": ALL[:3], "estimate_s": round(cpu_check.plan(60)[2])}
    assert result["runs"] == {"auto": {"steps": 9}}
    assert result["steps"]["tokens_per_sec"].keys() == set(ALL[:3]) and "wall_s" in result


@pytest.mark.parametrize("stop", ["ctrl_c", "sigterm"])
def test_a_check_stopped_early_still_prints_what_it_measured(monkeypatch, capsys, stop):
    """A Ctrl-C, or the SIGTERM a time limit sends, during the steps: the warm-ups already measured come out."""

    def steps(corpus, rounds, ways, out):
        out["warmup_s"] = {"float32_compiled": 38.0}
        if stop == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)
        raise KeyboardInterrupt

    monkeypatch.setattr(cpu_check, "steps", steps)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        cpu_check.main([])
    assert signal.getsignal(signal.SIGTERM) is before
    result = json.loads(capsys.readouterr().out)
    assert result["steps"] == {"warmup_s": {"float32_compiled": 38.0}} and result["interrupted_after_s"] < 10
    assert "runs" not in result and "wall_s" not in result
