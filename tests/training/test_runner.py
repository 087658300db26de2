"""How a training step runs (training/runner/): train.compile's choice, the rule auto follows on each device and the
lines it prints; the runner's timing, its comparison after the warm-up and what it records; and the loop around a CUDA
graph of the whole step, on the CPU. A CUDA graph cannot run here, so its stand-in `EagerReplay` records the step's
function and calls it at each replay, writing the same static tensors a replay does: the batches go through the static
buffers, the loss and gradient norm are copied out before the next replay, the optimizer's and the average's updates
happen once per step, and a capture that fails leaves the run eager. tests/test_cuda.py runs the real graph."""

import contextlib
import json
import math
from unittest import mock

import pytest
import torch

from common.errors import ConfigError
from inference.checkpoint import load_checkpoint
from tests.helpers import ROOT, same_precision, scalar_tags, train_job
from training import trainer
from training.runner import plan as compile_plan
from training.runner import steps as step_runner
from training.runner.plan import (
    EAGER,
    Way,
    compile_setting,
    fixed_way,
    graph_blocker,
    measured_way,
    pays,
    worth_a_line,
)

CPU, CUDA, MPS = torch.device("cpu"), torch.device("cuda", 0), torch.device("mps")


@pytest.mark.parametrize(
    "value,setting",
    [(True, "true"), (False, "false"), ("True", "true"), ("off", "false"), ("auto", "auto"), ("Auto", "auto")],
)
def test_every_spelling_and_the_boolean_of_older_checkpoints(value, setting):
    assert compile_setting(value) == setting


def test_spaces_around_a_spelling_are_refused_as_for_every_key():
    with pytest.raises(
        ConfigError,
        match=r"^train.compile=' Auto ' is invalid: the spaces around it are part of the "
        r"value; write train.compile=Auto$",
    ):
        compile_setting(" Auto ")


@pytest.mark.parametrize("value", ["maybe", "2", "", None])
def test_other_values_are_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"^train.compile=.* is invalid: it must be true, false or auto$"):
        compile_setting(value)


def test_false_and_true_need_no_measurement():
    assert fixed_way("false", CUDA, torch.bfloat16, None) == (EAGER, "train.compile=false")
    assert fixed_way("true", CUDA, torch.bfloat16, None)[0] == Way(inductor=True, graph=True)
    assert fixed_way("true", CPU, torch.float32, "CUDA graphs need a CUDA device")[0] == Way(inductor=True)
    way, why = fixed_way("true", CUDA, torch.float16, "under torchrun ...")
    assert way == Way(inductor=True) and "no CUDA graph: under torchrun" in why


@pytest.mark.parametrize("bf16", [False, True])
def test_auto_on_a_cpu_times_the_run_only_where_bf16_is_native(bf16):
    with mock.patch("training.runner.plan.has_native_bf16", return_value=bf16):
        assert fixed_way("auto", CPU, torch.float32, "x") == (EAGER, mock.ANY)  # float32 never pays
        assert (fixed_way("auto", CPU, torch.bfloat16, "x") is None) is bf16  # emulated bf16: eager
    assert fixed_way("auto", MPS, torch.float32, "x")[0] == EAGER
    assert fixed_way("auto", CUDA, torch.bfloat16, None) is None  # a GPU run is always timed


def test_the_payback_rule():
    assert pays(1000, 2.0, 100) and not pays(300, 2.0, 100)  # saves 500 >= 2 x 100; saves 150 < 200
    assert not pays(0, 10.0, 0.1)


with mock.patch.object(compile_plan, "has_native_bf16", return_value=True):
    PRIOR_CPU = compile_plan.prior_costs(CPU, torch.bfloat16)  # a CPU with bf16 instructions, in bf16
PRIOR_CUDA = compile_plan.prior_costs(CUDA, torch.bfloat16)


@pytest.fixture(autouse=True)
def idle(monkeypatch):
    """An idle machine unless a test says otherwise (the warm-up is scaled by the load per core)."""
    monkeypatch.setattr(compile_plan, "load_factor", lambda: 1.0)


def test_auto_on_a_bf16_cpu_compiles_a_300_s_run_and_not_a_short_one():
    way, why = measured_way(CPU, 300, 6000, "CUDA graphs need a CUDA device", PRIOR_CPU)
    assert way == Way(inductor=True) and "about 300 s of eager steps left" in why and "auto:" not in why
    assert "not measured on this machine yet" in why
    assert measured_way(CPU, 20, 340, "x", PRIOR_CPU)[0] == EAGER  # make train's length: never pays back


def test_make_train_never_compiles_on_a_busy_or_slow_machine():
    """make train is 347 steps: a step slowed six-fold (a busy machine) makes 140 s of eager steps, which at the
    priors' speedup would pay back a 25-s warm-up; but a compile slows as much, and no warm-up pays back in so few
    steps."""
    assert measured_way(CPU, 340 * 0.4, 340, "x", PRIOR_CPU)[0] == EAGER
    with mock.patch.object(compile_plan, "load_factor", return_value=2.5):  # load 5 on 2 cores
        assert measured_way(CPU, 300, 8000, "x", PRIOR_CPU)[0] == EAGER  # pays when idle, not with 2.5x the warm-up
    assert measured_way(CPU, 300, 8000, "x", PRIOR_CPU)[0] == Way(inductor=True)


def test_what_this_machine_measured_before_replaces_the_priors():
    slow = compile_plan.Costs(1.03, 10.0, "measured here before")  # inductor gained 3% here: never again
    assert measured_way(CPU, 30000, 600000, "x", slow)[0] == EAGER
    assert "measured here before" in measured_way(CPU, 600, 12000, "x", slow)[1]
    near = measured_way(CPU, 600, 12000, "x", compile_plan.Costs(1.08, 4.0, "measured here before"))[1]
    assert "not 1.1x faster on this CPU (steps about 1.08x faster compiled" in near  # never rounded to the bar
    warm = compile_plan.Costs(1.6, 7.5, "measured here before")  # a warm cache: a 120-s run pays back
    assert measured_way(CPU, 120, 2400, "x", warm)[0] == Way(inductor=True)
    assert measured_way(CPU, 120, 2400, "x", PRIOR_CPU)[0] == EAGER  # cold, it would not


def test_auto_on_cuda_graphs_any_real_run_and_adds_inductor_to_a_long_one():
    assert measured_way(CUDA, 0.5, 500, None, PRIOR_CUDA)[0] == EAGER  # a test's few steps
    assert measured_way(CUDA, 40, 20000, None, PRIOR_CUDA)[0] == Way(graph=True)
    assert measured_way(CUDA, 3600, 10**6, None, PRIOR_CUDA)[0] == Way(inductor=True, graph=True)
    assert measured_way(CUDA, 3600, 10**6, None, PRIOR_CUDA, inductor_ok=False)[0] == Way(graph=True)
    assert measured_way(CUDA, 3600, 10**6, "under torchrun ...", PRIOR_CUDA)[0] == Way(inductor=True)
    assert measured_way(CUDA, 40, 20000, "under torchrun ...", PRIOR_CUDA)[0] == EAGER


def test_graph_blockers():
    assert graph_blocker(CUDA, False, False) is None
    assert "CUDA device" in graph_blocker(CPU, False, False)
    assert "torchrun" in graph_blocker(CUDA, True, False)
    assert "mtp_weights" in graph_blocker(CUDA, False, True)


def test_a_float32_cpu_run_says_nothing_as_its_precision_line():
    assert not worth_a_line(CPU, torch.float32, EAGER)
    assert worth_a_line(CPU, torch.float32, Way(inductor=True))
    assert worth_a_line(CPU, torch.bfloat16, EAGER) and worth_a_line(CUDA, torch.float32, EAGER)


def test_the_priors_are_the_measured_ones():
    """The rule's numbers come from the measurements in docs/en/training.md; a change there changes them here."""
    assert compile_plan.CPU_BF16_INDUCTOR_SPEEDUP == 1.6 and compile_plan.PAYBACK == 2.0 and compile_plan.KEEP == 1.1


# -- the runner: auto's timing, the comparison after the warm-up, what it records ----------------------------------


class Clock:
    """Stands in for the runner's clock: each step it times takes `step` seconds."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step  # from one reading to the next: one step
        return self.now


def test_make_train_never_compiles_even_when_its_steps_are_slowed(tmp_path, monkeypatch):
    """make train's run (the default model, 10 passes over the built-in corpus) on a CPU that takes the bf16 path,
    each eager step timed six times slower than an idle machine makes it: auto stays eager."""
    from tests.helpers import config_object
    from training.runner import steps as step_runner
    from training.session import setup
    from training.step import train_step

    monkeypatch.setenv("KOCHAR_CPU_BF16", "1")
    job = config_object(
        "train", "device=cpu", f"data.cache_dir={tmp_path / 'cache'}", "train.compile=auto", "train.sample_chars=0"
    )
    s, state = setup(job, tmp_path / "run")
    s.logger.close()
    assert s.max_steps == 347 and s.dtype == torch.bfloat16
    runner = step_runner.StepRunner(s)
    monkeypatch.setattr(runner, "_now", Clock(0.4))
    while runner.way is None:
        train_step(s, state, runner.step_fn(state))
    assert runner.way == EAGER and state.step == compile_plan.PROBE_STEPS + 1


def _compiled_run(tmp_path, monkeypatch, compiled_faster: bool):
    """A bf16 auto run on a CPU made to compile at once, with a stand-in for inductor whose steps are faster or
    slower than the eager ones (the clock the runner reads says so). Its records go to the user's cache, which
    starts empty as on a fresh machine (tests/conftest.py)."""
    from tests.helpers import train_job
    from training import trainer
    from training.runner import steps as step_runner

    class StandIn(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.inner = model

        def forward(self, *args, **kwargs):
            clock.step = 0.01 if compiled_faster else 0.03
            return self.inner(*args, **kwargs)

    clock = Clock(0.02)
    monkeypatch.setenv("KOCHAR_CPU_BF16", "1")
    monkeypatch.setattr(step_runner.torch, "compile", StandIn)
    monkeypatch.setattr(step_runner.plan, "measured_way", lambda *a, **k: (Way(inductor=True), "test"))
    monkeypatch.setattr(step_runner.StepRunner, "_now", lambda self: clock())
    job = train_job(
        tmp_path,
        "data.path=data/corpus/ko_default.txt",
        "train.max_steps=40",
        "train.compile=auto",
        "train.eval_interval=40",
    )
    result = trainer.train(job, tmp_path / "run")
    return result, compile_plan.read_all()


def test_a_compiled_run_that_is_not_faster_goes_back_to_eager_and_says_so(tmp_path, monkeypatch, capsys):
    result, records = _compiled_run(tmp_path, monkeypatch, compiled_faster=False)
    out = capsys.readouterr().out
    assert result.step == 40 and "compile: warm-up took" in out
    assert (
        "compile: back to eager: a compiled step takes 30.0 ms against 20.0 ms eager (0.67x), under the 1.1x "
        "that pays for compiling; recorded for the next run on this machine"
    ) in out, out
    (record,) = records.values()
    assert record["speedup"] == 0.667 and record["eager_ms"] == 20.0 and "warmup_s" in record


def test_a_faster_compiled_run_is_kept_and_recorded(tmp_path, monkeypatch, capsys):
    result, records = _compiled_run(tmp_path, monkeypatch, compiled_faster=True)
    assert "compile: kept: a compiled step takes 10.0 ms against 20.0 ms eager (2.00x)" in capsys.readouterr().out
    ((key, record),) = records.items()
    assert record["speedup"] == 2.0 and "bfloat16" in key and "inductor" in key


def test_what_a_run_recorded_is_what_the_next_run_expects(tmp_path, monkeypatch):

    monkeypatch.setattr(compile_plan, "records_path", lambda: tmp_path / "records.json")
    prior = compile_plan.prior_costs(CPU, torch.float32)
    assert compile_plan.measured_costs("k", CPU, torch.float32, "/cache") == prior  # nothing measured yet
    assert compile_plan.write_record("k", warmup_s=30.0, warm=False, cache="/cache", speedup=1.5) is None
    assert compile_plan.measured_costs("k", CPU, torch.float32, "/cache") == compile_plan.Costs(
        1.5, 30.0 * compile_plan.WARM_SHARE, "measured here before"
    )  # warm now
    assert (
        compile_plan.measured_costs("k", CPU, torch.float32, "/another").warmup == 30.0
    )  # not the cache that holds it
    (tmp_path / "records.json").write_text("not json")
    assert compile_plan.measured_costs("k", CPU, torch.float32, "/cache") == prior  # unreadable: no hint


def test_a_fresh_machine_gets_its_records_folder_made():
    assert not compile_plan.records_path().parent.exists()  # this test's user cache is empty (tests/conftest.py)
    assert compile_plan.write_record("k", warmup_s=12.0) is None
    assert compile_plan.read_all().get("k", {}) == {"warmup_s": 12.0}


def test_records_that_cannot_be_written_are_said_once_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a_file"))  # its kochar-gpt folder cannot be made
    result, records = _compiled_run(tmp_path, monkeypatch, compiled_faster=False)
    out = capsys.readouterr().out
    folder = tmp_path / "a_file" / "kochar-gpt"
    assert result.step == 40 and records == {}
    assert out.count(f"compile: could not record the measurements in {folder} (") == 1, out
    assert "compile: back to eager: a compiled step takes 30.0 ms" in out and "recorded for the next" not in out


DEEP = "[" * 200_000 + "]" * 200_000  # deeper than Python's parser recurses


@pytest.mark.parametrize(
    "text",
    [
        "[1, 2]",
        "null",
        '{"k": [1, 2]}',
        '{"k": "fast"}',
        '{"k": {"warmup_s": -5, "speedup": "2", "warm": 1, "cache": 3, "eager_ms": true}}',
        '{"k": {"warmup_s": NaN, "speedup": Infinity, "compiled_ms": -Infinity}}',
        '{"k": {"warmup_s": {"s": 1}}}',
        DEEP,
        "\xff\xfe not text",
    ],
    ids=["a list", "null", "a list record", "a text record", "wrong types", "non-finite", "nested", "deep", "bytes"],
)
def test_a_records_file_of_any_shape_reads_as_empty_and_is_written_over(text):
    path = compile_plan.records_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(text.encode("latin-1") if text.startswith("\xff") else text.encode())
    assert compile_plan.read_all().get("k", {}) == {}
    assert compile_plan.measured_costs("k", CPU, torch.float32, "/c") == compile_plan.prior_costs(CPU, torch.float32)
    assert compile_plan.write_record("k", warmup_s=3.0, speedup=1.2) is None
    assert compile_plan.read_all().get("k", {}) == {"warmup_s": 3.0, "speedup": 1.2}


def test_a_run_goes_on_over_records_of_the_wrong_shape(tmp_path, monkeypatch, capsys):
    _, records = _compiled_run(tmp_path / "first", monkeypatch, compiled_faster=True)
    ((key, _),) = records.items()
    compile_plan.records_path().write_text(json.dumps({key: {"warmup_s": -1.0, "speedup": [2]}, "other": 7}))
    result, records = _compiled_run(tmp_path / "second", monkeypatch, compiled_faster=True)
    assert result.step == 40 and records[key]["speedup"] == 2.0 and records[key]["warmup_s"] > 0


@pytest.mark.parametrize("counts,warm", [([(5, 3), (7, 3)], True), ([(5, 3), (6, 4)], False), ([(0, 0)] * 2, False)])
def test_a_warm_up_is_recorded_warm_only_where_inductors_cache_served_every_graph(tmp_path, monkeypatch, counts, warm):
    readings = iter(counts)
    monkeypatch.setattr(step_runner.plan, "inductor_cache_counts", lambda: next(readings))
    _, records = _compiled_run(tmp_path, monkeypatch, compiled_faster=True)
    ((_, record),) = records.items()
    assert record["warm"] is warm


def test_auto_weighs_what_this_machine_measured_where_the_priors_never_compile():
    """A float32 CPU run compiles on no prior; once this machine has a record of the run's compile, auto times the run
    and says the numbers it weighed."""
    assert fixed_way("auto", CPU, torch.float32, "x", True) is None
    measured = compile_plan.Costs(1.04, 20.0, "measured here before")
    way, why = measured_way(CPU, 3000, 60000, "x", measured)
    assert way == EAGER and "compiled steps are not 1.1x faster on this CPU" in why and "measured here before" in why
    assert worth_a_line(CPU, torch.float32, EAGER, measured=True)
    fast = compile_plan.Costs(1.5, 20.0, "measured here before")
    assert measured_way(CPU, 3000, 60000, "x", fast)[0] == Way(inductor=True)


@pytest.mark.slow
def test_on_a_fresh_user_cache_a_compiled_run_leaves_records_the_next_auto_run_reads(tmp_path, corpus):
    from tests.helpers import cli

    def train(name: str, compile_: str):
        args = ("model=tiny", f"data.path={corpus}", "train.max_steps=12", "train.eval_interval=12")
        return cli(
            "train.py",
            *args,
            "train.dtype=float32",
            "train.sample_chars=0",
            f"train.compile={compile_}",
            f"hydra.run.dir={tmp_path / name}",
        )

    records = compile_plan.records_path()
    assert not records.parent.exists()  # a fresh machine's cache: no folder of ours in it
    first = train("compiled", "true")
    assert first.returncode == 0 and records.is_file(), first.stderr
    assert any("warmup_s" in r for r in compile_plan.read_all().values())
    second = train("auto", "auto")
    assert second.returncode == 0, second.stderr
    assert "compile: eager (train.compile=auto; " in second.stdout and "measured here before" in second.stdout


# -- the whole step as a CUDA graph, on the CPU: a stand-in replay writes what a replay writes -------------------

CORPUS = ROOT / "data" / "corpus" / "ko_default.txt"
STEPS = 14


class EagerReplay:
    """A stand-in for model/cuda_graph.py's `CudaGraph` on any device: `replay` runs the recorded function, with the
    gradients released first as a replay overwrites them."""

    def __init__(self, params):
        self.params, self.fn = params, None

    def side(self):
        return contextlib.nullcontext()

    def capture(self, fn):
        self.fn = fn

    def replay(self):
        for p in self.params:
            p.grad = None
        self.fn()


def graphed(monkeypatch, backend=None):
    """Make the loop run the graph path on the CPU, with `backend(session)` (the stand-in by default)."""
    backend = backend or (lambda s: EagerReplay(list(s.raw_model.parameters())))
    monkeypatch.setattr(step_runner.plan, "fixed_way", lambda *a: (Way(graph=True), "test"))
    monkeypatch.setattr(trainer, "StepRunner", lambda s: step_runner.StepRunner(s, graph_backend=backend))


def run(tmp_path, name, *overrides):
    job = train_job(
        tmp_path,
        f"data.path={CORPUS}",
        f"train.max_steps={STEPS}",
        "train.log_interval=3",
        "train.eval_interval=7",
        *overrides,
    )
    result = trainer.train(job, tmp_path / name)
    return result, load_checkpoint(tmp_path / name / "ckpt.pt"), scalar_tags(tmp_path / name)


@pytest.mark.parametrize(
    "overrides",
    [
        (),
        ("train.grad_accum_steps=2", "model.dropout=0.1"),
        ("train.optimizer=muon",),  # Muon's step runs eagerly after each replay
        ("train.average=ema", "train.ema_half_life=3"),
    ],
    ids=["plain", "accumulation-dropout", "muon", "ema"],
)
def test_the_graph_path_trains_exactly_as_the_eager_step(tmp_path, monkeypatch, capsys, overrides):
    eager, eager_ckpt, eager_tags = run(tmp_path, "eager", *overrides)
    graphed(monkeypatch)
    graph, graph_ckpt, graph_tags = run(
        tmp_path, "graph", "train.compile=true", same_precision(tmp_path / "eager"), *overrides
    )
    assert graph.step == eager.step == STEPS
    assert all(torch.equal(v, graph_ckpt.model[k]) for k, v in eager_ckpt.model.items())
    assert (graph_ckpt.averaged is None) is (eager_ckpt.averaged is None)
    assert all(torch.equal(v, graph_ckpt.averaged[k]) for k, v in (eager_ckpt.averaged or {}).items())
    assert graph_ckpt.training.optimizer["param_groups"] == eager_ckpt.training.optimizer["param_groups"]
    for tag in ("train/loss", "train/grad_norm", "val/loss", "train/lr"):
        assert graph_tags[tag] == eager_tags[tag], tag
    out = capsys.readouterr().out
    assert "compile: a CUDA graph of the whole step (test)" in out
    assert "compile: warm-up took" in out and "graph captured in" in out


def test_a_nan_right_after_a_check_is_still_caught(tmp_path, monkeypatch):
    """The step's loss is a static tensor the next replay overwrites: the loss watch must hold a copy."""
    from training import step as step_module
    from training.guards.divergence import TrainingDiverged

    real, calls = step_module.compute_loss, []

    def nan_at(model, x, y):
        calls.append(1)
        loss = real(model, x, y)
        return loss * float("nan") if len(calls) == 8 else loss  # step 8: the first after the check at step 7

    monkeypatch.setattr(step_module, "compute_loss", nan_at)
    graphed(monkeypatch)
    with pytest.raises(TrainingDiverged, match=r"^the loss became nan between steps 8 and 9"):
        run(tmp_path, "nan", "model.dropout=0", "train.compile=true")


def test_a_capture_that_fails_says_so_in_one_line_and_the_run_goes_on_eagerly(tmp_path, monkeypatch, capsys):
    class Refuses(EagerReplay):
        def capture(self, fn):
            raise RuntimeError("operation not permitted when stream is capturing\nsecond line")

    eager, eager_ckpt, _ = run(tmp_path, "eager")
    graphed(monkeypatch, lambda s: Refuses(list(s.raw_model.parameters())))
    result, ckpt, _ = run(tmp_path, "fallback", "train.compile=true", same_precision(tmp_path / "eager"))
    lines = [line for line in capsys.readouterr().out.splitlines() if "could not be built" in line]
    assert lines == [
        "compile: the CUDA graph could not be built (RuntimeError: operation not permitted when stream "
        "is capturing second line); the steps go on without it"
    ]
    assert result.step == STEPS and math.isfinite(result.val_loss)
    assert all(torch.equal(v, ckpt.model[k]) for k, v in eager_ckpt.model.items())


def test_an_inductor_failure_on_its_first_step_leaves_the_run_eager(tmp_path, monkeypatch, capsys):
    class Broken(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self._orig_mod = model

        def forward(self, *args, **kwargs):
            raise RuntimeError("inductor could not build a kernel")

    monkeypatch.setattr(step_runner.torch, "compile", Broken)
    monkeypatch.setattr(step_runner.plan, "fixed_way", lambda *a: (Way(inductor=True), "test"))
    result, _, _ = run(tmp_path, "broken", "train.compile=true")
    out = capsys.readouterr().out
    assert (
        "compile: inductor failed (RuntimeError: inductor could not build a kernel); the steps go on without it" in out
    )
    assert result.step == STEPS and math.isfinite(result.val_loss)
