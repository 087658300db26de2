"""train.compile's choice (training/compile_plan.py): the rule auto follows on each device, and the lines it prints."""

from unittest import mock

import pytest
import torch

from common.errors import ConfigError
from training import compile_plan
from training.compile_plan import (
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


@pytest.mark.parametrize("value,setting", [(True, "true"), (False, "false"), ("True", "true"), ("off", "false"),
                                           ("auto", "auto"), ("Auto", "auto")])
def test_every_spelling_and_the_boolean_of_older_checkpoints(value, setting):
    assert compile_setting(value) == setting


def test_spaces_around_a_spelling_are_refused_as_for_every_key():
    with pytest.raises(ConfigError, match=r"^train.compile=' Auto ' is invalid: the spaces around it are part of the "
                                          r"value; write train.compile=Auto$"):
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
    with mock.patch("training.compile_plan.has_native_bf16", return_value=bf16):
        assert fixed_way("auto", CPU, torch.float32, "x") == (EAGER, mock.ANY)  # float32 never pays
        assert (fixed_way("auto", CPU, torch.bfloat16, "x") is None) is bf16  # emulated bf16: eager
    assert fixed_way("auto", MPS, torch.float32, "x")[0] == EAGER
    assert fixed_way("auto", CUDA, torch.bfloat16, None) is None  # a GPU run is always timed


def test_the_payback_rule():
    assert pays(1000, 2.0, 100) and not pays(300, 2.0, 100)  # saves 500 >= 2 x 100; saves 150 < 200
    assert not pays(0, 10.0, 0.1)


def test_auto_on_a_bf16_cpu_compiles_a_300_s_run_and_not_a_short_one():
    way, why = measured_way(CPU, 300, "CUDA graphs need a CUDA device")
    assert way == Way(inductor=True) and "about 300 s of eager steps left" in why and "auto:" not in why
    assert measured_way(CPU, 20, "x")[0] == EAGER  # make train's length: the warm-up would not pay back


def test_auto_on_cuda_graphs_any_real_run_and_adds_inductor_to_a_long_one():
    assert measured_way(CUDA, 0.5, None)[0] == EAGER  # a test's few steps
    assert measured_way(CUDA, 40, None)[0] == Way(graph=True)
    assert measured_way(CUDA, 3600, None)[0] == Way(inductor=True, graph=True)
    assert measured_way(CUDA, 3600, None, inductor_ok=False)[0] == Way(graph=True)  # emulated bf16: no inductor
    assert measured_way(CUDA, 3600, "under torchrun ...")[0] == Way(inductor=True)
    assert measured_way(CUDA, 40, "under torchrun ...")[0] == EAGER


def test_graph_blockers():
    assert graph_blocker(CUDA, False, False) is None
    assert "CUDA device" in graph_blocker(CPU, False, False)
    assert "torchrun" in graph_blocker(CUDA, True, False)
    assert "mtp_weights" in graph_blocker(CUDA, False, True)


def test_a_float32_cpu_run_says_nothing_as_its_precision_line():
    assert not worth_a_line(CPU, torch.float32, EAGER)
    assert worth_a_line(CPU, torch.float32, Way(inductor=True))
    assert worth_a_line(CPU, torch.bfloat16, EAGER) and worth_a_line(CUDA, torch.float32, EAGER)


def test_the_constants_are_the_measured_ones():
    """The rule's numbers come from the measurements in docs/en/training.md; a change there changes them here."""
    assert compile_plan.CPU_BF16_INDUCTOR_SPEEDUP == 1.6 and compile_plan.PAYBACK == 2.0
