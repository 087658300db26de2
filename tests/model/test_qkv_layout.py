"""The attention weights' two layouts (model/qkv_layout.py): state dicts and optimizer states move between them
without losing a number, so a run written in one layout trains on in the other exactly as it would have."""

import copy

import pytest
import torch

from model.qkv_layout import match_layout, other_layout_names, to_fused, to_heads
from tests.helpers import tiny_model
from training.optim.factory import make_optimizer
from training.optim.layout import match_optimizer_layout
from training.settings.config import TrainConfig

CPU = torch.device("cpu")


def float32_optimizer(model, optimizer: str) -> torch.optim.Optimizer:
    """The run's optimizer, Muon's Newton-Schulz pinned to float32: on a CPU with bf16 instructions (or with
    KOCHAR_CPU_BF16=1) it would run in bfloat16, whose rounding of the two layouts' differently ordered products is
    far above the float32 tolerance the layouts' steps are compared at."""
    opt = make_optimizer(model, 1e-2, 0.1, (0.9, 0.95), CPU, TrainConfig(optimizer=optimizer))
    if optimizer == "muon":
        opt.ns_dtype = torch.float32
    return opt


def trained(attention: str, optimizer: str, steps: int = 3):
    """A tiny model in `attention`'s layout and its optimizer after `steps` steps on fixed batches."""
    model = tiny_model(attention, seed=1, position="rope" if optimizer == "muon" else "learned").train()
    opt = float32_optimizer(model, optimizer)
    for i in range(steps):
        step(model, opt, i)
    return model, opt


def step(model, opt, i: int) -> None:
    g = torch.Generator().manual_seed(i)
    x, y = torch.randint(0, 50, (4, 16), generator=g), torch.randint(0, 50, (4, 16), generator=g)
    model(x, y)[1].backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def test_state_dicts_round_trip_in_order():
    heads = tiny_model("heads").state_dict()
    fused = to_fused(heads)
    assert [k for k in fused if "attn" in k][:3] == [
        "blocks.0.attn.qkv",
        "blocks.0.attn.proj.weight",
        "blocks.0.attn.proj.bias",
    ]
    assert fused["blocks.0.attn.qkv"].shape == (3, 4, 8, 32)
    back = to_heads(fused)
    assert list(back) == list(heads) and all(torch.equal(back[k], heads[k]) for k in heads)
    assert match_layout(fused, "fused") == fused and list(match_layout(fused, "heads")) == list(heads)
    names = list(dict(tiny_model("fused").named_parameters()))
    assert other_layout_names(other_layout_names(names, 4), 4) == names


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
@pytest.mark.parametrize("saved_in,resumed_in", [("heads", "fused"), ("fused", "heads")])
def test_a_resumed_optimizer_keeps_every_moment_in_the_other_layout(optimizer, saved_in, resumed_in):
    """Trained 3 steps in one layout, then a 4th in the other from the saved states: the same weights as a 4th step
    in the first layout (to float rounding: the two paths multiply in another order)."""
    model, opt = trained(saved_in, optimizer)
    other = tiny_model(resumed_in, seed=2, position=model.config.position).train()
    other.load_state_dict(model.state_dict())
    other_opt = float32_optimizer(other, optimizer)
    saved = copy.deepcopy(opt.state_dict())  # as read from a file: not the live moments the next step changes
    other_opt.load_state_dict(match_optimizer_layout(saved, other_opt, other))
    assert len(other_opt.state) == len(list(other.parameters()))  # every parameter has its moments
    step(model, opt, 3)
    step(other, other_opt, 3)
    expected = match_layout(model.state_dict(), resumed_in)
    for key, value in other.state_dict().items():
        torch.testing.assert_close(value, expected[key], rtol=1e-4, atol=1e-5, msg=key)


def test_the_same_layout_and_a_foreign_state_are_left_to_load_state_dict():
    model, opt = trained("fused", "adamw", steps=1)
    saved = opt.state_dict()
    assert match_optimizer_layout(saved, opt, model) is saved
    odd = {"state": {}, "param_groups": [{"params": [0]}]}
    assert match_optimizer_layout(odd, opt, model) is odd
