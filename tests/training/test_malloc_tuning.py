"""common/malloc_tuning.py: glibc keeps the buffers a training step frees instead of returning them every step."""

import platform
import sys

import pytest

from common import malloc_tuning


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"), reason="glibc only")
def test_on_glibc_the_thresholds_are_set_once():
    assert malloc_tuning.keep_freed_memory() is True
    assert (
        malloc_tuning.keep_freed_memory() is True
    )  # once per process (functools.cache); the second call changes nothing
    assert (
        malloc_tuning.keep_freed_memory.__wrapped__() is True
    )  # glibc accepts these values (it refuses any above its maximum)


def test_elsewhere_it_does_nothing(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert malloc_tuning.keep_freed_memory.__wrapped__() is False


def test_a_libc_without_mallopt_is_left_alone(monkeypatch):
    class NoMallopt:
        def __init__(self, name):
            pass

    monkeypatch.setattr(malloc_tuning.ctypes, "CDLL", NoMallopt)
    monkeypatch.setattr(sys, "platform", "linux")
    assert malloc_tuning.keep_freed_memory.__wrapped__() is False


def test_a_training_run_on_the_cpu_sets_them(tmp_path, small_corpus, monkeypatch):
    from tests.helpers import train_job
    from training.trainer import train

    calls = []
    monkeypatch.setattr("training.session.keep_freed_memory", lambda: calls.append(1) or True)
    train(
        train_job(tmp_path, f"data.path={small_corpus}", "train.max_steps=1", "model.context_length=16"),
        tmp_path / "run",
    )
    assert calls == [1]
