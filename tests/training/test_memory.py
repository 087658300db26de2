"""A model or a batch that cannot fit is refused before it is allocated (training/guards/memory.py): one line naming
what it needs and what there is, and what would fit (the largest batch and train.grad_accum_steps, or the settings
that make the model smaller), with the device's available memory patched; an allocator's out-of-memory error says
the same; what fits today is never refused."""

from __future__ import annotations

import pytest
import torch

import training.guards.memory as memory_fit
from common.errors import UserError
from model import AttentionLanguageModel
from model.config import ModelConfig
from tests.helpers import TINY, cli, stderr_lines, train_job
from training.guards.memory import StepMemory, estimate, fit_memory
from training.settings.config import TrainConfig

CPU = torch.device("cpu")


def _train(tmp_path, corpus, *overrides: str):
    from training.trainer import train

    run = tmp_path / "run"
    return train(train_job(tmp_path, f"data.path={corpus}", "train.max_steps=2", *overrides), run), run


def _no_steps(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a step ran")

    monkeypatch.setattr("training.trainer.train_step", refuse)
    monkeypatch.setattr("training.settings.auto.measured_tokens_per_sec", refuse)


def test_a_batch_that_cannot_fit_is_refused_before_any_step(tmp_path, corpus, monkeypatch):
    _no_steps(monkeypatch)
    monkeypatch.setattr(memory_fit, "available_bytes", lambda device: 6 << 20)  # the model fits, not the batch
    with pytest.raises(UserError) as e:
        _train(tmp_path, corpus, "train.batch_size=64", "train.grad_accum_steps=2")
    message = str(e.value)
    assert "\n" not in message and message.startswith(
        "train.batch_size=64 does not fit in memory: one step needs about "
    ), message
    assert "the CPU has 0.0 GiB available; the largest batch that fits is about " in message
    assert "train.grad_accum_steps=" in message and "(128 asked for)" in message
    assert not (tmp_path / "run" / "ckpt.pt").exists()


def test_the_refusal_names_the_largest_batch_and_the_accumulation_that_keeps_the_effective_batch():
    t = TrainConfig(batch_size=64, grad_accum_steps=1)
    e = memory_fit.refusal(t, CPU, 12 << 30, 8 << 30, 40)
    assert str(e) == (
        "train.batch_size=64 does not fit in memory: one step needs about 12.0 GiB and the CPU has 8.0 "
        "GiB available; the largest batch that fits is about 40: train.batch_size=32 "
        "train.grad_accum_steps=2 trains on 64 sequences per step (64 asked for)"
    )
    assert "a batch of 1 would not fit either" in str(memory_fit.refusal(t, CPU, 12 << 30, 1 << 30, 0))
    memory = StepMemory(fixed=100, per_sequence=10)
    assert memory.total(5) == 150 and memory.largest_batch(450) == 5  # with 3x room: 3 x 150 bytes
    assert memory.largest_batch(115) == 1 and memory.largest_batch(109) == 0  # one sequence, if only the estimate


def test_the_auto_dropout_speed_measurement_is_guarded_too(tmp_path, corpus, monkeypatch):
    """model.dropout=null under a time budget measures steps of the run's batch during setup: refused before."""
    _no_steps(monkeypatch)
    monkeypatch.setattr(memory_fit, "available_bytes", lambda device: 6 << 20)  # the model fits
    with pytest.raises(UserError, match="train.batch_size=32 does not fit in memory"):
        _train(tmp_path, corpus, "model.dropout=null", "train.max_seconds=30", "train.batch_size=32")


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to "
            "allocate 68719476736 bytes. Error code 12 (Cannot allocate memory)"
        ),
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB"),
    ],
)
def test_an_allocator_s_out_of_memory_error_says_the_same(tmp_path, corpus, monkeypatch, error):
    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr("training.trainer.train_step", fail)
    with pytest.raises(UserError) as e:
        _train(tmp_path, corpus, "train.batch_size=8")
    assert str(e.value) == (
        "train.batch_size=8 ran out of memory in a step (the CPU's allocator refused it); try "
        "half the batch: train.batch_size=4 train.grad_accum_steps=2 trains on 8 sequences per "
        "step (8 asked for)"
    )


def test_another_runtime_error_is_left_as_it_is():
    with pytest.raises(RuntimeError, match="shape mismatch"), fit_memory(_model(), TrainConfig(), CPU, torch.float32):
        raise RuntimeError("shape mismatch")


def _model(**settings) -> AttentionLanguageModel:
    return AttentionLanguageModel(ModelConfig(**{"vocab_size": 2000, "dropout": 0.0, **settings}))


@pytest.mark.parametrize(
    "model,batch",
    [({}, 8), ({"context_length": 256, "embedding_size": 384, "head_size": 384, "num_heads": 6, "num_blocks": 6}, 64)],
)
def test_what_fits_today_is_never_refused(model, batch):
    """The default size (batch 8) and the shakespeare size of the benchmarks (batch 64, in bf16 or fp32) ask for
    far less than any machine that runs them has; the estimate is a lower bound (see the module docstring)."""
    m = _model(**model)
    for dtype in (torch.float32, torch.bfloat16):
        need = estimate(m, TrainConfig(batch_size=batch), CPU, dtype).total(batch)
        assert need < (4 << 30), need


def test_the_estimate_grows_with_what_a_step_holds():
    t = TrainConfig(batch_size=8)
    base = estimate(_model(), t, CPU, torch.float32)
    assert estimate(_model(vocab_size=8000), t, CPU, torch.float32).per_sequence > base.per_sequence
    assert estimate(_model(attention="heads"), t, CPU, torch.float32).per_sequence > base.per_sequence
    assert estimate(_model(), t, CPU, torch.float32, optimizer_loaded=True).fixed < base.fixed
    assert estimate(_model(), TrainConfig(optimizer="muon"), CPU, torch.float32).fixed < base.fixed


def test_the_cli_refuses_a_batch_no_machine_holds_in_one_line(tmp_path, corpus):
    r = cli(
        "train.py",
        *TINY,
        "train.batch_size=100000000",
        "train.max_steps=1",
        f"data.path={corpus}",
        f"hydra.run.dir={tmp_path / 'run'}",
        f"data.cache_dir={tmp_path / 'cache'}",
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    last = stderr_lines(r.stderr)[-1]
    assert last.startswith("error: train.batch_size=100000000 does not fit in memory: one step needs about "), last
    assert "train.grad_accum_steps=" in last


def test_the_available_memory_is_read():
    available = memory_fit.available_bytes(CPU)
    assert available is None or available > 0
    assert memory_fit.available_bytes(torch.device("meta")) is None


def test_a_model_too_big_to_build_is_refused_before_it_is_allocated(tmp_path, corpus, monkeypatch):
    built = []
    monkeypatch.setattr("training.session.AttentionLanguageModel", lambda *a, **k: built.append(1))
    with pytest.raises(UserError) as e:
        _train(
            tmp_path,
            corpus,
            "model.embedding_size=16384",
            "model.head_size=16384",
            "model.num_heads=64",
            "model.num_blocks=48",
        )
    message = str(e.value)
    assert not built and "\n" not in message
    assert message.startswith(
        "the model does not fit in memory: model.embedding_size=16384 model.head_size=16384 "
        "model.num_blocks=48 model.context_length=32 ("
    ), message
    assert (
        "GiB available; make it smaller: a lower model.embedding_size, model.head_size or model.num_blocks" in message
    )


def test_the_parameters_counted_from_the_settings_are_a_close_lower_bound():
    from model.counts import matrix_parameters, num_parameters

    for settings in ({}, {"tie_weights": True}, {"position": "rope", "mlp": "swiglu", "num_blocks": 6}):
        m = _model(**settings)
        assert 0.9 * num_parameters(m) <= matrix_parameters(m.config) <= num_parameters(m), settings


def test_an_allocator_s_out_of_memory_error_while_building_the_model_is_the_same_line(tmp_path, corpus, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr("training.session.AttentionLanguageModel", fail)
    with pytest.raises(
        UserError,
        match="^the model does not fit in memory: .* needs, with its gradients, optimizer "
        "state and one sequence's step, more than the CPU's allocator could give",
    ):
        _train(tmp_path, corpus)


def test_the_cli_refuses_a_model_no_machine_holds_in_one_line(tmp_path, corpus):
    r = cli(
        "train.py",
        *TINY,
        "model.embedding_size=16384",
        "model.head_size=16384",
        "model.num_heads=64",
        "model.num_blocks=48",
        "train.max_steps=1",
        f"data.path={corpus}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert stderr_lines(r.stderr)[-1].startswith("error: the model does not fit in memory: "), r.stderr


GIB = 1 << 30
V1_NO_LIMIT = "9223372036854771712"  # what cgroup v1 writes for "no limit" on 4-KiB pages


def _cgroups(tmp_path, monkeypatch, proc_self: str, files: dict[str, int | str]) -> None:
    """A fake /sys/fs/cgroup holding `files` and a fake /proc/self/cgroup saying `proc_self`."""
    root = tmp_path / "cgroup"
    root.mkdir(parents=True)
    for name, value in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"{value}\n")
    (tmp_path / "proc_self_cgroup").write_text(proc_self)
    monkeypatch.setattr(memory_fit, "CGROUP_ROOT", root)
    monkeypatch.setattr(memory_fit, "PROC_CGROUP", tmp_path / "proc_self_cgroup")


def _v1(folder: str, limit: int | str, usage: int, cache: int) -> dict:
    return {
        f"{folder}/memory.limit_in_bytes": limit,
        f"{folder}/memory.usage_in_bytes": usage,
        f"{folder}/memory.stat": f"cache 0\nrss {usage - cache}\ntotal_cache {cache}",
    }


def test_a_cgroup_v1_limit_on_this_process_counts_and_its_no_limit_does_not(tmp_path, monkeypatch):
    """v1's memory controller, in the process's own cgroup from /proc/self/cgroup, under a top without a limit;
    the page cache counts as free."""
    proc_self = "9:name=systemd:/\n4:memory:/docker/abc\n0::/\n"
    top = _v1("memory", V1_NO_LIMIT, 5 * GIB, GIB)
    _cgroups(tmp_path, monkeypatch, proc_self, {**top, **_v1("memory/docker/abc", 2 * GIB, 3 * GIB // 2, GIB // 2)})
    assert memory_fit._cgroup_room() == GIB
    assert memory_fit.available_bytes(CPU) <= GIB
    _cgroups(tmp_path / "none", monkeypatch, proc_self, {**top, **_v1("memory/docker/abc", V1_NO_LIMIT, GIB, 0)})
    assert memory_fit._cgroup_room() is None


def test_a_container_that_mounts_its_own_cgroup_as_the_top_reads_the_top(tmp_path, monkeypatch):
    """Without a cgroup namespace /proc/self/cgroup names the host's path, which the container's mount lacks."""
    _cgroups(tmp_path, monkeypatch, "4:memory:/docker/abc\n", _v1("memory", GIB, GIB // 4, 0))
    assert memory_fit._cgroup_room() == 3 * GIB // 4


def test_the_tightest_cgroup_v2_limit_above_this_process_counts(tmp_path, monkeypatch):
    files = {
        "a/memory.max": GIB,
        "a/memory.current": GIB // 2,
        "a/memory.stat": "anon 1\nfile 0",
        "a/b/memory.max": "max",
        "a/b/memory.current": GIB // 4,
        "a/b/memory.stat": "file 0",
    }
    _cgroups(tmp_path, monkeypatch, "0::/a/b\n", files)
    assert memory_fit._cgroup_room() == GIB // 2
    _cgroups(tmp_path / "own", monkeypatch, "0::/a/b\n", {**files, "a/b/memory.max": GIB // 2})
    assert memory_fit._cgroup_room() == GIB // 4
