"""train.dtype=auto chooses by what the device computes natively, and says why (common/device.py). The CUDA cases
patch the capability query and the CPU cases the instruction flags, so they run on any machine; KOCHAR_CPU_BF16
overrides the CPU's detection, which `make test` uses to run the cpu_precision tests on both paths."""

import itertools
import re

import pytest
import torch

import common.device
from common.device import CPU_BF16_ENV, check_compiled_precision, choose_precision, has_native_bf16, precision_line
from common.errors import UserError
from tests.helpers import TINY, assert_one_line_error, cli, cli_all, tiny_model
from training.optim.factory import make_optimizer
from training.settings.config import TrainConfig

CUDA = torch.device("cuda:0")
CPU = torch.device("cpu")
CARDS = {
    (6, 1): "Tesla P40",
    (7, 0): "Tesla V100",
    (7, 5): "Tesla T4",
    (8, 0): "NVIDIA A100",
    (8, 9): "NVIDIA L4",
    (9, 0): "NVIDIA H100",
}


@pytest.fixture
def card(monkeypatch):
    """Pretend CUDA device 0 is the card of a compute capability; is_bf16_supported says yes, as recent torch does
    on a T4 (through emulation), so the choice must not trust it."""

    def use(capability: tuple[int, int]) -> None:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: CARDS[capability])
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)

    return use


@pytest.mark.parametrize(
    "capability,dtype",
    [
        ((7, 5), torch.float16),
        ((8, 0), torch.bfloat16),
        ((9, 0), torch.bfloat16),
        ((8, 9), torch.bfloat16),
        ((7, 0), torch.float16),
        ((6, 1), torch.float32),
    ],
)
def test_auto_on_cuda_takes_bfloat16_only_where_the_card_has_it(card, capability, dtype):
    card(capability)
    chosen, why = choose_precision("auto", CUDA)
    assert chosen == dtype
    assert f"compute capability {capability[0]}.{capability[1]}" in why and CARDS[capability] in why
    assert has_native_bf16(CUDA) == (capability >= (8, 0))


def test_the_run_says_its_precision_and_why(card):
    card((7, 5))
    line = precision_line(*choose_precision("auto", CUDA), CUDA)
    assert line == (
        "precision: float16 autocast with loss scaling on cuda:0 (train.dtype=auto; the Tesla T4, "
        "compute capability 7.5, has no native bfloat16 (only a slow emulation); float16 runs on its "
        "tensor cores, with loss scaling)"
    )
    card((9, 0))
    assert precision_line(*choose_precision("auto", CUDA), CUDA).startswith(
        "precision: bfloat16 autocast on cuda:0 (train.dtype=auto; the NVIDIA H100, compute capability 9.0, "
        "computes bfloat16"
    )
    assert precision_line(torch.float32, "auto", torch.device("cpu")) is None  # the plain CPU run says nothing


def test_an_explicit_bfloat16_on_an_emulating_card_is_kept_but_said(card):
    card((7, 5))
    dtype, why = choose_precision("bfloat16", CUDA)
    assert dtype == torch.bfloat16 and "only emulates bfloat16" in why and "auto chooses float16" in why


@pytest.mark.parametrize("capability", [(7, 5), (7, 0)])
def test_compile_never_builds_a_bfloat16_graph_for_a_card_without_it(card, capability):
    card(capability)
    with pytest.raises(
        UserError,
        match=r"^train.compile=true with train.dtype=bfloat16 needs a GPU with native "
        r"bfloat16 .* use train.dtype=auto \(float16 there\) or train.dtype=float32$",
    ):
        check_compiled_precision(True, torch.bfloat16, CUDA)
    check_compiled_precision(True, choose_precision("auto", CUDA)[0], CUDA)  # auto's choice compiles
    check_compiled_precision(False, torch.bfloat16, CUDA)  # uncompiled, bfloat16 runs (emulated)


def test_compile_with_bfloat16_on_a_card_that_has_it(card):
    card((8, 0))
    check_compiled_precision(True, torch.bfloat16, CUDA)


def test_the_cpu_and_unknown_names():
    assert choose_precision("float32", torch.device("cpu")) == (torch.float32, "train.dtype=float32")
    with pytest.raises(UserError, match="float16 is not supported on the CPU"):
        choose_precision("float16", torch.device("cpu"))
    with pytest.raises(UserError, match="unknown train.dtype=half"):
        choose_precision("half", torch.device("cpu"))


@pytest.fixture
def cpu_flags(monkeypatch):
    """Pretend the CPU has (or lacks) bf16 instructions, KOCHAR_CPU_BF16 unset unless the test sets it."""
    monkeypatch.delenv(CPU_BF16_ENV, raising=False)

    def use(bf16: bool) -> None:
        monkeypatch.setattr(common.device, "_cpu_flags_have_bf16", lambda: bf16)

    return use


@pytest.mark.parametrize("flags", [True, False])
def test_auto_on_the_cpu_autocasts_only_where_it_has_bf16_instructions(cpu_flags, flags):
    cpu_flags(flags)
    dtype, why = choose_precision("auto", CPU)
    assert dtype == (torch.bfloat16 if flags else torch.float32) and has_native_bf16(CPU) == flags
    assert precision_line(dtype, why, CPU) == (
        "precision: bfloat16 autocast on cpu (train.dtype=auto; this CPU has "
        "bfloat16 instructions (AVX512-BF16 or AMX))"
        if flags
        else None
    )


@pytest.mark.parametrize(
    "value,flags,dtype,said",
    [
        ("1", False, torch.bfloat16, "train.dtype=auto; KOCHAR_CPU_BF16=1 takes the CPU's bfloat16 path"),
        ("0", True, torch.float32, "train.dtype=auto; KOCHAR_CPU_BF16=0 keeps the CPU in float32"),
        ("", True, torch.bfloat16, "train.dtype=auto; this CPU has bfloat16 instructions (AVX512-BF16 or AMX)"),
        (
            "",
            False,
            torch.float32,
            "train.dtype=auto; this CPU has no bfloat16 instructions (it would emulate them, slower)",
        ),
    ],
    ids=["forced_on", "forced_off", "detected", "not_detected"],
)
def test_kochar_cpu_bf16_overrides_the_detection_and_says_so(cpu_flags, monkeypatch, value, flags, dtype, said):
    cpu_flags(flags)
    monkeypatch.setenv(CPU_BF16_ENV, value)  # empty: as if unset
    assert choose_precision("auto", CPU) == (dtype, said)
    assert has_native_bf16(CPU) == (dtype == torch.bfloat16)
    muon = make_optimizer(tiny_model(), 1e-2, 0.1, (0.9, 0.95), CPU, TrainConfig(optimizer="muon"))
    assert muon.ns_dtype == dtype  # Muon's Newton-Schulz takes the same path
    assert choose_precision("float32", CPU) == (torch.float32, "train.dtype=float32")  # a typed dtype stays


def test_the_override_leaves_a_gpu_alone(card, cpu_flags, monkeypatch):
    cpu_flags(False)
    monkeypatch.setenv(CPU_BF16_ENV, "1")
    card((7, 5))
    assert choose_precision("auto", CUDA)[0] == torch.float16 and not has_native_bf16(CUDA)


@pytest.mark.parametrize(
    "value,shown", [("yes", "yes"), ("true", "true"), ("2", "2"), (" 1", "' 1'"), ("1\n", "'1\\n'")]
)
def test_an_invalid_override_is_refused_naming_it(cpu_flags, monkeypatch, value, shown):
    monkeypatch.setenv(CPU_BF16_ENV, value)
    spaces = ": the spaces around it are part of the value" if value != value.strip() else ""  # shown quoted
    with pytest.raises(
        UserError,
        match=rf"^KOCHAR_CPU_BF16={re.escape(shown)} is not understood{spaces}; use "
        r"KOCHAR_CPU_BF16=1 \(.*\), KOCHAR_CPU_BF16=0 \(.*\) or leave it unset",
    ):
        choose_precision("auto", CPU)


def test_no_precision_reason_reads_as_an_automatic_setting(card, cpu_flags, monkeypatch):
    """The automatic settings' lines start "auto:" (training/settings/auto.py); a precision line never says it."""
    chosen = []
    for capability in CARDS:
        card(capability)
        chosen += [(CUDA, *choose_precision(name, CUDA)) for name in ("auto", "bfloat16", "float16", "float32")]
    for value in ("", "0", "1"):
        for flags in (True, False):
            cpu_flags(flags)
            monkeypatch.setenv(CPU_BF16_ENV, value)
            chosen += [(CPU, *choose_precision(name, CPU)) for name in ("auto", "bfloat16", "float32")]
    chosen.append((torch.device("mps"), *choose_precision("auto", torch.device("mps"))))
    for device, dtype, why in chosen:
        assert why.startswith("train.dtype=") and "auto:" not in why, why
        line = precision_line(dtype, why, device)
        assert line is None or (line.startswith("precision: ") and "auto:" not in line), line


def test_a_start_on_the_bf16_path_prints_nothing_before_its_checks_pass(tmp_path, corpus):
    """The precision line comes once the settings, corpus and resume have passed their checks: a refused start
    prints its error line alone; a started one says its precision first, then its automatic settings."""
    forced = {CPU_BF16_ENV: "1"}
    common = (*TINY, f"data.cache_dir={tmp_path / 'cache'}", "train.max_steps=1", "train.eval_interval=1")
    refused, ran = cli_all(
        ("train.py", *common, f"data.path={tmp_path / 'nope.txt'}", f"hydra.run.dir={tmp_path}/a"),
        ("train.py", *common, f"data.path={corpus}", f"hydra.run.dir={tmp_path}/b", "model.dropout=null"),
        env=forced,
    )
    assert_one_line_error(refused, "corpus file not found", "nope.txt")
    assert ran.returncode == 0, ran.stderr[-2000:]
    lines = ran.stdout.splitlines()
    assert (
        lines[0] == "precision: bfloat16 autocast on cpu (train.dtype=auto; KOCHAR_CPU_BF16=1 takes the CPU's "
        "bfloat16 path)"
    )
    assert lines[1].startswith("auto: model.dropout=")
    invalid = cli(
        "train.py", *common, f"data.path={corpus}", f"hydra.run.dir={tmp_path / 'c'}", env={CPU_BF16_ENV: "on"}
    )
    assert_one_line_error(invalid, "KOCHAR_CPU_BF16=on is not understood", "KOCHAR_CPU_BF16=1")


@pytest.mark.parametrize("key", ["dtype", "--dtype", "train.dtype"])
def test_a_refusal_names_the_key_as_the_tool_spells_it(key):
    """evaluate.py's key is `dtype`, the benchmarks' `--dtype`: a refusal never names train.dtype to them."""
    with pytest.raises(UserError) as e:
        choose_precision("float16", torch.device("cpu"), key)
    assert str(e.value) == f"{key}=float16 is not supported on the CPU; use {key}=bfloat16 or {key}=float32"
    with pytest.raises(UserError, match=f"^unknown {key}=half; "):
        choose_precision("half", torch.device("cpu"), key)
    assert choose_precision("float32", torch.device("cpu"), key) == (torch.float32, f"{key}=float32")


def test_evaluate_py_names_its_own_dtype_key(tmp_path):
    from tests.helpers import assert_one_line_error, cli

    r = cli("evaluate.py", "device=cpu", "dtype=float16", f"data.path={tmp_path / 'text.txt'}")
    line = assert_one_line_error(r, "dtype=float16 is not supported on the CPU")
    assert "train." not in line, line


def _timed(monkeypatch, bf16_speed: float, calls: list) -> None:
    """Stand in for the timed steps: bf16 autocast steps at `bf16_speed` tokens/s, float32 steps at 1000."""
    from training.settings.precision import ROUNDS

    def timed(model, optimizer_for, batches, autocasts, rounds, clip):
        calls.append(["bfloat16" if isinstance(a(), torch.autocast) else "float32" for a in autocasts])
        assert rounds == ROUNDS and clip == 1.0  # the run's train.grad_clip: timed as the run steps
        return [[1 / bf16_speed, 1 / 1000]] * rounds  # seconds per token

    monkeypatch.setattr("training.settings.precision.token_seconds", timed)


@pytest.mark.parametrize(
    "bf16_speed, name", [(2000, "bfloat16"), (1100, "float32"), (500, "float32")], ids=["faster", "margin", "slower"]
)
def test_auto_on_a_bf16_cpu_times_both_and_takes_bf16_only_past_the_margin(
    tmp_path, corpus, cpu_flags, monkeypatch, capsys, bf16_speed, name
):
    from inference.checkpoint import load_checkpoint
    from tests.helpers import train_job
    from training.trainer import train

    cpu_flags(True)
    calls: list = []
    _timed(monkeypatch, bf16_speed, calls)
    train(train_job(tmp_path, f"data.path={corpus}", "train.max_steps=2", "train.dtype=auto"), tmp_path / "run")
    assert calls == [["bfloat16", "float32"]]  # one measurement, the two taking turns
    ckpt = load_checkpoint(tmp_path / "run" / "ckpt.pt")
    tokens = ckpt.config["train"]["batch_size"] * ckpt.model_config.context_length
    out = capsys.readouterr().out
    assert (
        f"precision: {'bfloat16 autocast' if name == 'bfloat16' else 'float32'} on cpu (train.dtype=auto; measured on "
        f"this CPU, a step takes {1000 * tokens / bf16_speed:.1f} ms in bfloat16 and {tokens:.1f} ms in float32; "
        f"bfloat16 is taken when 1.15x as fast or more, and was {bf16_speed / 1000:.2f}x)" in out
    ), out
    measured = ckpt.config["measured"]["precision"]
    assert ckpt.config["train"]["dtype"] == measured["chosen"] == name
    assert measured["step_ms"]["float32"] == tokens and measured["bf16_speedup"] == bf16_speed / 1000


@pytest.mark.parametrize("speedup", [1.3, 1 / 1.3])
def test_rounds_that_a_load_hit_cannot_flip_the_measured_precision(speedup):
    """Seven paired rounds of (bf16, float32) seconds: any three rounds where a load slowed one side five times,
    or a load that rises round by round, leave the choice as the quiet rounds make it."""
    from training.settings.precision import ROUNDS, bf16_speedup, precision_for

    quiet = [(1.0, speedup)] * ROUNDS
    expected = precision_for(bf16_speedup(quiet))
    assert expected == ("bfloat16" if speedup > 1 else "float32")
    for side in (0, 1):
        for hit in itertools.combinations(range(ROUNDS), 3):
            noisy = [
                tuple(t * (5 if r in hit and i == side else 1) for i, t in enumerate(p)) for r, p in enumerate(quiet)
            ]
            assert precision_for(bf16_speedup(noisy)) == expected, (side, hit)
    rising = [(bf16 * (1 + r), float32 * (1 + r)) for r, (bf16, float32) in enumerate(quiet)]
    assert bf16_speedup(rising) == pytest.approx(speedup)


def test_bf16_must_be_the_margin_faster_to_be_taken():
    """A bf16 step 1.12x as fast (a busy machine's noise could show that much) keeps float32; 1.15x takes bf16."""
    from training.settings.precision import BF16_MARGIN, bf16_speedup, precision_for

    assert BF16_MARGIN == 1.15
    assert precision_for(bf16_speedup([(10.8, 12.1)] * 3)) == "float32"  # 1.12x
    assert precision_for(bf16_speedup([(10.0, 11.5)] * 3)) == "bfloat16"
    assert precision_for(0.8) == precision_for(1.0) == precision_for(1.14) == "float32"


def test_a_typed_dtype_a_resume_and_a_cpu_without_bf16_measure_nothing(
    tmp_path, corpus, cpu_flags, monkeypatch, capsys
):
    from inference.checkpoint import load_checkpoint
    from tests.helpers import train_job
    from training.trainer import train

    calls: list = []
    _timed(monkeypatch, 2000, calls)
    cpu_flags(False)
    train(train_job(tmp_path, f"data.path={corpus}", "train.max_steps=2"), tmp_path / "plain")
    assert "precision:" not in capsys.readouterr().out  # float32 on a CPU without bf16, as before
    cpu_flags(True)
    train(train_job(tmp_path, f"data.path={corpus}", "train.max_steps=2", "train.dtype=float32"), tmp_path / "typed")
    run = tmp_path / "auto"
    train(train_job(tmp_path, f"data.path={corpus}", "train.max_steps=2"), run)
    assert len(calls) == 1  # only the auto run measured
    resumed = (f"data.path={corpus}", "train.max_steps=4", f"train.resume={run}")
    monkeypatch.setattr("training.settings.resume._command_line", list(resumed))  # as train.py records what was typed
    train(train_job(tmp_path, *resumed), run)
    assert len(calls) == 1 and load_checkpoint(run / "ckpt.pt").config["train"]["dtype"] == "bfloat16"


def test_a_resume_keeps_its_checkpoints_precision(tmp_path, corpus, monkeypatch, capsys):
    """A float32 run resumed where `auto` means bf16 (this CPU pretends to have bf16 instructions) stays float32;
    a typed train.dtype is applied and named like any changed setting."""
    import common.device
    import training.settings.resume as settings
    from inference.checkpoint import load_checkpoint
    from tests.helpers import train_job
    from training.trainer import train

    run, common_args = tmp_path / "run", (f"data.path={corpus}", "train.snapshot_interval=0")
    train(train_job(tmp_path, *common_args, "train.max_steps=2", "train.dtype=float32"), run)
    monkeypatch.delenv(common.device.CPU_BF16_ENV, raising=False)
    monkeypatch.setattr(common.device, "_cpu_flags_have_bf16", lambda: True)
    _timed(monkeypatch, 2000, [])  # bf16 twice as fast, as timed on such a CPU
    capsys.readouterr()
    for steps, typed, dtype in ((4, (), "float32"), (6, ("train.dtype=bfloat16",), "bfloat16")):
        overrides = (*common_args, f"train.max_steps={steps}", f"train.resume={run}", *typed)
        monkeypatch.setattr(settings, "_command_line", list(overrides))  # as train.py records what was typed
        train(train_job(tmp_path, *overrides), run)
        out = capsys.readouterr().out
        assert load_checkpoint(run / "ckpt.pt").config["train"]["dtype"] == dtype
        assert ("precision: bfloat16 autocast on cpu (train.dtype=bfloat16)" in out) == bool(typed), out
        assert ("train.dtype=bfloat16 (was float32)" in out) == bool(typed), out
    fresh = train_job(tmp_path, *common_args, "train.max_steps=1")  # auto, recorded as what it resolved to
    monkeypatch.setattr(settings, "_command_line", None)
    train(fresh, tmp_path / "fresh")
    assert load_checkpoint(tmp_path / "fresh" / "ckpt.pt").config["train"]["dtype"] == "bfloat16"
