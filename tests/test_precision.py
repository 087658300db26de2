"""train.dtype=auto chooses by what the device computes natively, and says why (common/device.py). The CUDA cases
patch the capability query, so they run on any machine."""

import pytest
import torch

from common.device import check_compiled_precision, choose_precision, has_native_bf16, precision_line
from common.errors import UserError

CUDA = torch.device("cuda:0")
CARDS = {(6, 1): "Tesla P40", (7, 0): "Tesla V100", (7, 5): "Tesla T4", (8, 0): "NVIDIA A100", (8, 9): "NVIDIA L4",
         (9, 0): "NVIDIA H100"}


@pytest.fixture
def card(monkeypatch):
    """Pretend CUDA device 0 is the card of a compute capability; is_bf16_supported says yes, as recent torch does
    on a T4 (through emulation), so the choice must not trust it."""
    def use(capability: tuple[int, int]) -> None:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: CARDS[capability])
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    return use


@pytest.mark.parametrize("capability,dtype", [((7, 5), torch.float16), ((8, 0), torch.bfloat16),
                                              ((9, 0), torch.bfloat16), ((8, 9), torch.bfloat16),
                                              ((7, 0), torch.float16), ((6, 1), torch.float32)])
def test_auto_on_cuda_takes_bfloat16_only_where_the_card_has_it(card, capability, dtype):
    card(capability)
    chosen, why = choose_precision("auto", CUDA)
    assert chosen == dtype
    assert f"compute capability {capability[0]}.{capability[1]}" in why and CARDS[capability] in why
    assert has_native_bf16(CUDA) == (capability >= (8, 0))


def test_the_run_says_its_precision_and_why(card):
    card((7, 5))
    line = precision_line(*choose_precision("auto", CUDA), CUDA)
    assert line == ("precision: float16 autocast with loss scaling on cuda:0 (auto: the Tesla T4, compute capability "
                    "7.5, has no native bfloat16 (only a slow emulation); float16 runs on its tensor cores, with loss "
                    "scaling)")
    card((9, 0))
    assert precision_line(*choose_precision("auto", CUDA), CUDA).startswith(
        "precision: bfloat16 autocast on cuda:0 (auto: the NVIDIA H100, compute capability 9.0, computes bfloat16")
    assert precision_line(torch.float32, "auto", torch.device("cpu")) is None  # the plain CPU run says nothing


def test_an_explicit_bfloat16_on_an_emulating_card_is_kept_but_said(card):
    card((7, 5))
    dtype, why = choose_precision("bfloat16", CUDA)
    assert dtype == torch.bfloat16 and "only emulates bfloat16" in why and "auto chooses float16" in why


@pytest.mark.parametrize("capability", [(7, 5), (7, 0)])
def test_compile_never_builds_a_bfloat16_graph_for_a_card_without_it(card, capability):
    card(capability)
    with pytest.raises(UserError, match=r"^train.compile=true with train.dtype=bfloat16 needs a GPU with native "
                                        r"bfloat16 .* use train.dtype=auto \(float16 there\) or train.dtype=float32$"):
        check_compiled_precision(True, torch.bfloat16, CUDA)
    check_compiled_precision(True, choose_precision("auto", CUDA)[0], CUDA)  # auto's choice compiles
    check_compiled_precision(False, torch.bfloat16, CUDA)  # uncompiled, bfloat16 runs (emulated)


def test_compile_with_bfloat16_on_a_card_that_has_it(card):
    card((8, 0))
    check_compiled_precision(True, torch.bfloat16, CUDA)


def test_the_cpu_and_unknown_names():
    assert choose_precision("float32", torch.device("cpu")) == (torch.float32, "train.dtype")
    with pytest.raises(UserError, match="float16 is not supported on the CPU"):
        choose_precision("float16", torch.device("cpu"))
    with pytest.raises(UserError, match="unknown train.dtype=half"):
        choose_precision("half", torch.device("cpu"))


@pytest.mark.parametrize("key", ["dtype", "--dtype", "train.dtype"])
def test_a_refusal_names_the_key_as_the_tool_spells_it(key):
    """evaluate.py's key is `dtype`, the benchmarks' `--dtype`: a refusal never names train.dtype to them."""
    with pytest.raises(UserError) as e:
        choose_precision("float16", torch.device("cpu"), key)
    assert str(e.value) == f"{key}=float16 is not supported on the CPU; use {key}=bfloat16 or {key}=float32"
    with pytest.raises(UserError, match=f"^unknown {key}=half; "):
        choose_precision("half", torch.device("cpu"), key)
    assert choose_precision("float32", torch.device("cpu"), key) == (torch.float32, key)


def test_evaluate_py_names_its_own_dtype_key(tmp_path):
    from tests.helpers import assert_one_line_error, cli

    r = cli("evaluate.py", "device=cpu", "dtype=float16", f"data.path={tmp_path / 'text.txt'}")
    line = assert_one_line_error(r, "dtype=float16 is not supported on the CPU")
    assert "train." not in line, line
