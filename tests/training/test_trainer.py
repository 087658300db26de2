"""The training loop: schedule, weight decay, clipping, accumulation, resume, time budget, DDP."""

import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from inference.checkpoint import load_checkpoint
from model import AttentionLanguageModel
from tests.helpers import ROOT, same_precision, scalar_tags, tiny_model, train_job
from training.optim.factory import param_groups
from training.optim.schedule import lr_at
from training.trainer import train


def cfg_for(tmp_path, *overrides):
    return train_job(tmp_path, *overrides)


def test_schedule_values():
    kw = dict(lr=1e-3, min_lr=1e-4, warmup_steps=10, total_steps=110)
    assert lr_at(0, **kw) == pytest.approx(1e-3 * 1 / 11)
    assert lr_at(9, **kw) == pytest.approx(1e-3 * 10 / 11)
    assert lr_at(10, **kw) == pytest.approx(1e-3)
    assert lr_at(60, **kw) == pytest.approx(1e-4 + 0.5 * 0.9e-3)  # half way: cos(pi/2) = 0
    assert lr_at(110, **kw) == pytest.approx(1e-4)
    assert lr_at(500, **kw) == pytest.approx(1e-4)
    assert lr_at(60, **kw, schedule="constant") == 1e-3
    values = [lr_at(s, **kw) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))


def test_weight_decay_only_on_matrices():
    m = tiny_model(vocab_size=20, context_length=8, embedding_size=16, head_size=16, num_heads=2, tie_weights=True)
    decay, no_decay = param_groups(m, 0.1)
    names = {id(p): n for n, p in m.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    kept = {names[id(p)] for p in no_decay["params"]}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(n.endswith(("weight", "attn.qkv")) and "ln" not in n and "embedding" not in n for n in decayed)
    assert {"token_embedding.weight", "position_embedding.weight", "ln_f.weight", "ln_f.bias"} <= kept
    assert "blocks.0.attn.qkv" in decayed and "blocks.0.ffwd.fc.bias" in kept
    assert len(decayed) + len(kept) == len(list(m.parameters()))  # the tied matrix counted once


def test_grad_clipping_is_logged_and_applied(tmp_path):
    r = train(
        cfg_for(tmp_path, "train.max_steps=3", "train.eval_interval=3", "train.grad_clip=0.01", "train.log_interval=1"),
        tmp_path / "run",
    )
    norms = [v for _, v in scalar_tags(tmp_path / "run")["train/grad_norm"]]
    assert len(norms) == 3 and all(n > 0.01 for n in norms)  # the pre-clip norm is what is logged
    assert r.step == 3


@pytest.mark.parametrize("clip", [0.01, 0.0])
def test_the_update_applies_the_clipped_gradients(tmp_path, clip):
    """The gradients the optimizer steps on have the norm train.grad_clip allows (0: off), whatever way the step
    runs: eager, compiled and the CUDA graph all apply them through training/step.py's `apply_gradients`."""
    from training.session import setup
    from training.step import apply_gradients, forward_backward

    s, _ = setup(cfg_for(tmp_path, "train.max_steps=3", f"train.grad_clip={clip}", "train.dtype=float32"), tmp_path)
    s.logger.close()
    forward_backward(s, s.model, s.sampler.peek(), [])
    before = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in s.raw_model.parameters()]))
    stepped = []
    s.optimizer.register_step_pre_hook(
        lambda optimizer, args, kwargs: stepped.append([p.grad.clone() for p in s.raw_model.parameters()])
    )
    logged = apply_gradients(s)
    after = torch.linalg.vector_norm(torch.stack([g.norm() for g in stepped[0]]))
    assert float(logged) == pytest.approx(float(before)) and float(before) > 0.01
    assert float(after) == pytest.approx(clip if clip else float(before), rel=1e-4)


def _final_weights(run_dir: Path) -> dict:
    return load_checkpoint(run_dir / "ckpt.pt").model


def _assert_same(a: dict, b: dict, atol: float) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=atol), k


def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    # fp32: the equivalence is exact arithmetic; bf16 would round the two batchings differently
    common = ["train.max_steps=4", "train.eval_interval=4", "model.dropout=0.0", "train.lr=3e-3", "train.dtype=float32"]
    train(cfg_for(tmp_path, *common, "train.batch_size=8", "train.grad_accum_steps=1"), tmp_path / "big")
    train(cfg_for(tmp_path, *common, "train.batch_size=4", "train.grad_accum_steps=2"), tmp_path / "acc")
    _assert_same(_final_weights(tmp_path / "big"), _final_weights(tmp_path / "acc"), atol=2e-5)


def test_resume_continues_exactly(tmp_path):
    common = ["model.dropout=0.1", "train.eval_interval=3", "train.lr_decay_steps=12", "train.warmup_steps=2"]
    full = train(cfg_for(tmp_path, *common, "train.max_steps=12"), tmp_path / "full")
    half = (*common, same_precision(tmp_path / "full"))  # train.dtype=auto may measure the other way on a busy CPU
    train(cfg_for(tmp_path, *half, "train.max_steps=6"), tmp_path / "half")
    resumed = train(
        cfg_for(tmp_path, *half, "train.max_steps=12", f"train.resume={tmp_path / 'half'}"), tmp_path / "half"
    )
    assert resumed.step == full.step == 12
    _assert_same(_final_weights(tmp_path / "full"), _final_weights(tmp_path / "half"), atol=0)
    assert resumed.val_loss == full.val_loss
    from tests.helpers import scalar_tags

    steps = [s for s, _ in scalar_tags(tmp_path / "half")["val/loss"]]
    assert steps == [3, 6, 9, 12]  # one step axis across the resume


def test_max_seconds_stops_cleanly(tmp_path):
    r = train(
        cfg_for(tmp_path, "train.max_steps=1000000", "train.max_seconds=2", "train.eval_interval=100000"),
        tmp_path / "run",
    )
    assert r.stopped == "max_seconds" and 0 < r.step < 1000000
    ckpt = load_checkpoint(tmp_path / "run" / "ckpt.pt")
    assert ckpt.step == r.step and math.isfinite(ckpt.training.val_loss)
    assert (tmp_path / "run" / "best.pt").exists()


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize(
    "parts",
    [(), ("data.tokenizer=hangul", "model.embedding=jamo", "model.head=jamo", "train.average=ema")],
    ids=["char", "hangul-staged-averaged"],
)
def test_ddp_two_processes_on_cpu(tmp_path, parts):
    run = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "train.py",
        "model=tiny",
        "device=cpu",
        "train.batch_size=4",
        "train.max_steps=6",
        "train.eval_interval=3",
        "train.eval_steps=2",
        "train.sample_chars=0",
        "train.grad_accum_steps=2",
        f"hydra.run.dir={run}",
        f"data.cache_dir={tmp_path / 'cache'}",
        *parts,
    ]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    # the two ranks print at the same moment: their lines may share one line of the captured output
    firsts = dict(re.findall(r"rank (\d)/2: first batch ([0-9a-f]{12})", r.stdout))
    assert sorted(firsts) == ["0", "1"] and firsts["0"] != firsts["1"]  # ranks saw different data
    assert sorted(p.name for p in run.glob("*.pt")) == ["best.pt", "ckpt.pt"]
    ckpt = load_checkpoint(run / "ckpt.pt")
    assert ckpt.step == 6 and ckpt.training.world_size == 2
    # one average of the raw model (no DDP prefix), updated once per step whatever the world size
    assert (ckpt.averaged is not None) == ("train.average=ema" in parts)
    if ckpt.averaged is not None:
        assert ckpt.training.average_updates == 6 and ckpt.averaged.keys() == ckpt.model.keys()
    shutil.rmtree(run)


def test_overwrite_starts_the_curves_over(tmp_path):
    common = ["train.max_steps=2", "train.eval_interval=2"]
    train(cfg_for(tmp_path, *common), tmp_path / "run")
    train(cfg_for(tmp_path, *common, "train.overwrite=true", "train.lr=1e-4"), tmp_path / "run")
    from tests.helpers import scalar_tags

    assert len(list((tmp_path / "run").glob("events.out.tfevents.*"))) == 1
    assert [s for s, _ in scalar_tags(tmp_path / "run")["val/loss"]] == [2]


def test_a_wrong_resume_path_creates_no_folder(tmp_path):
    from tests.helpers import cli

    missing = tmp_path / "no_such_run"
    r = cli("train.py", "model=tiny", f"train.resume={missing}", f"data.cache_dir={tmp_path / 'cache'}", cwd=tmp_path)
    assert r.returncode == 2 and "not found" in r.stderr
    assert not missing.exists()


@pytest.mark.slow
def test_compiled_training_trains_as_eager_and_saves_plain_checkpoints(tmp_path):
    """torch.compile works on the CPU too (inductor): the compiled steps' losses are the eager steps' (to float32
    rounding: inductor fuses and reorders), the run says what it chose and how long the warm-up took, and the
    `_orig_mod.` prefix never reaches a checkpoint. The suite's one compile: a tiny model, float32, four steps."""
    from tests.helpers import cli, train_compiled

    same = (
        "device=cpu",
        "train.dtype=float32",
        "train.max_steps=4",
        "train.eval_interval=4",
        "train.eval_steps=1",
        "train.sample_chars=5",
        "train.log_interval=1",
    )
    run, payload = train_compiled(tmp_path, *same)
    assert payload.step == 4
    m = AttentionLanguageModel(payload.model_config)
    m.load_state_dict(payload.model)  # loads into a plain, uncompiled model
    eager = tmp_path / "eager"
    r = cli("train.py", "model=tiny", *same, f"hydra.run.dir={eager}", f"data.cache_dir={tmp_path / 'cache'}")
    assert r.returncode == 0, r.stderr[-2000:]
    compiled_losses, eager_losses = scalar_tags(run)["train/loss"], scalar_tags(eager)["train/loss"]
    assert [s for s, _ in compiled_losses] == [1, 2, 3, 4]
    assert [v for _, v in compiled_losses] == pytest.approx([v for _, v in eager_losses], rel=1e-4)
    assert payload.training.val_loss == pytest.approx(load_checkpoint(eager / "ckpt.pt").training.val_loss, rel=1e-4)


@pytest.mark.parametrize("kind", ["char", "jamo"])
def test_the_final_sample_counts_characters_for_every_tokenizer(small_corpus, tmp_path, kind):
    """train.sample_chars is a number of characters: a jamo model spends up to three tokens on one."""
    from data.corpus import load_corpus
    from training.reporting.sample import PROMPT_TOKENS, sample_chars

    corpus = load_corpus(small_corpus, cache_dir=tmp_path / "cache", tokenizer_kind=kind)
    model = tiny_model(vocab_size=corpus.tokenizer.vocab_size)
    decoder = corpus.tokenizer.stream_decoder()
    head = "".join(decoder.feed(int(i)) for i in corpus.tokens[:PROMPT_TOKENS])
    for n in (1, 7, 40):
        text = sample_chars(model, corpus.tokenizer, corpus.tokens, n, torch.device("cpu"), seed=3)
        assert text.startswith(head) and len(text) - len(head) == n
