"""train.syllable_rows=seen: the per-syllable tables held as the rows the training split reaches while
training, with the same values, the same first step, dense checkpoints, and resume."""

from __future__ import annotations

import copy

import pytest
import torch

from common.errors import UserError
from inference.checkpoint import load_checkpoint, save_checkpoint
from model import AttentionLanguageModel
from model.counts import num_parameters
from model.hangul.held_rows import HeldJamoEmbedding, HeldReadoutRows, compact_syllable_rows, dense_state_dict
from model.hangul.jamo_embedding import FIRST_ID, NUM_SYLLABLES
from tests.helpers import train_job
from training.optim.factory import make_optimizer
from training.settings import resume as resume_settings
from training.trainer import train

V = NUM_SYLLABLES + 40


def _model(seed: int = 0, **settings) -> AttentionLanguageModel:
    torch.manual_seed(seed)
    kw = dict(
        vocab_size=V,
        context_length=16,
        embedding_size=32,
        head_size=32,
        num_heads=2,
        num_blocks=1,
        embedding="jamo",
        head="jamo",
    )
    return AttentionLanguageModel(**{**kw, **settings})


def _reachable(seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.cat(
        [
            torch.randint(FIRST_ID, FIRST_ID + 400, (150,), generator=g),  # a few syllables...
            torch.arange(FIRST_ID + NUM_SYLLABLES, V),
        ]
    ).unique()  # ...and the other characters


def _batch(reachable: torch.Tensor, seed: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    pick = torch.randint(0, len(reachable), (2, 17), generator=g)
    ids = reachable[pick]
    return ids[:, :-1], ids[:, 1:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_held_rows_give_the_dense_models_values(dtype):
    dense = _model()
    with torch.no_grad():  # a trained-looking head: rows of reachable syllables and one the text lacks
        dense.lm_head.final_rows[:400].normal_(0, 0.3)
        dense.token_embedding.weight[FIRST_ID : FIRST_ID + 400].normal_(0, 0.3)
    held = copy.deepcopy(dense)
    reach = _reachable()
    dropped = compact_syllable_rows(held, reach)
    assert isinstance(held.token_embedding, HeldJamoEmbedding) and isinstance(held.lm_head.final_rows, HeldReadoutRows)
    assert dropped > 2 * (NUM_SYLLABLES - 500) and num_parameters(held) == num_parameters(dense)
    idx, tgt = _batch(reach)
    with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        # the held rows' scores are one product with the held table (HeldReadoutRows.dot), the dense head's a gather
        # and a sum: the same values up to the rounding of the two orders of summation
        tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=5e-2)
        torch.testing.assert_close(held.token_losses(idx, tgt), dense.token_losses(idx, tgt), **tol)
        assert torch.equal(held(idx)[0], dense(idx)[0])  # the joint over every id, unseen syllables included
        assert torch.equal(
            held.generate(idx[:, :4], 6, generator=torch.Generator().manual_seed(0)),
            dense.generate(idx[:, :4], 6, generator=torch.Generator().manual_seed(0)),
        )
    state = dense_state_dict(held)
    assert state.keys() == dense.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in dense.state_dict().items())


def test_the_first_step_moves_the_held_rows_as_it_moves_the_dense_ones():
    dense = _model()
    held = copy.deepcopy(dense)
    reach = _reachable()
    compact_syllable_rows(held, reach)
    idx, tgt = _batch(reach)
    for m in (dense, held):
        opt = make_optimizer(m, 1e-2, 0.1, (0.9, 0.99), torch.device("cpu"))
        m.token_losses(idx, tgt).mean().backward()  # (unclipped: the dense rows below add to the norm)
        opt.step()
    a, b = dense.state_dict(), dense_state_dict(held)
    for k in a:
        if k != "lm_head.final_rows":
            torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-7, msg=k)
    syl = reach[(reach >= FIRST_ID) & (reach < FIRST_ID + NUM_SYLLABLES)] - FIRST_ID
    torch.testing.assert_close(b["lm_head.final_rows"][syl], a["lm_head.final_rows"][syl], rtol=1e-5, atol=1e-7)
    others = torch.ones(NUM_SYLLABLES, dtype=torch.bool)
    others[syl] = False
    # the one difference: a dense head also pushes down the rows of its targets' pairs the text never holds
    assert b["lm_head.final_rows"][others].eq(0).all() and a["lm_head.final_rows"][others].ne(0).any()
    assert held.lm_head.final_rows.weight[-1].eq(0).all() and held.token_embedding.weight[-1].eq(0).all()


def test_rows_learned_elsewhere_are_held_and_other_models_are_left_dense():
    m = _model()
    with torch.no_grad():
        m.lm_head.final_rows[7000].fill_(1.0)  # learned by a source run on other text
    compact_syllable_rows(m, _reachable())
    assert m.lm_head.final_rows.full()[7000].eq(1.0).all()
    for settings in (dict(embedding="token", head="softmax"), dict(head="softmax", tie_weights=True)):
        plain = _model(**settings)
        assert compact_syllable_rows(plain, _reachable()) == 0
        assert not isinstance(plain.token_embedding, HeldJamoEmbedding)


@pytest.fixture
def hangul_run(tmp_path, corpus):
    return lambda *o: train_job(
        tmp_path,
        f"data.path={corpus}",
        "data.tokenizer=hangul",
        "model.embedding=jamo",
        "model.head=jamo",
        "train.eval_interval=2",
        *o,
    )


def test_a_run_holds_its_rows_saves_them_dense_and_resumes(tmp_path, hangul_run):
    run = tmp_path / "run"
    train(hangul_run("train.max_steps=4"), run)
    ckpt = load_checkpoint(run / "ckpt.pt")
    assert ckpt.config["train"]["syllable_rows"] == "seen"
    assert ckpt.model["lm_head.final_rows"].shape[0] == NUM_SYLLABLES
    assert ckpt.model["token_embedding.weight"].shape[0] == ckpt.model_config.vocab_size
    assert ckpt.model["lm_head.final_rows"].eq(0).all(dim=1).sum() > NUM_SYLLABLES - 2000  # rows it never held
    r = train(hangul_run(f"train.resume={run}", "train.max_steps=6"), run)
    assert r.step == 6


def test_a_run_from_before_the_setting_resumes_with_every_row(tmp_path, hangul_run):
    run = tmp_path / "run"
    train(hangul_run("train.max_steps=2", "train.syllable_rows=all"), run)
    ckpt = load_checkpoint(run / "ckpt.pt")
    del ckpt.config["train"]["syllable_rows"]  # as written before the setting existed
    save_checkpoint(ckpt, run / "ckpt.pt")
    job = hangul_run(f"train.resume={run}", "train.max_steps=4")
    assert train(job, run).step == 4 and job.train.syllable_rows == "all"
    assert load_checkpoint(run / "ckpt.pt").config["train"]["syllable_rows"] == "all"


def test_typing_seen_on_a_run_from_before_the_setting_is_refused(tmp_path, hangul_run, monkeypatch):
    run = tmp_path / "run"
    train(hangul_run("train.max_steps=2", "train.syllable_rows=all"), run)
    ckpt = load_checkpoint(run / "ckpt.pt")
    del ckpt.config["train"]["syllable_rows"]
    save_checkpoint(ckpt, run / "ckpt.pt")
    typed = [f"train.resume={run}", "train.max_steps=4", "train.syllable_rows=seen"]
    monkeypatch.setattr(resume_settings, "_command_line", typed)  # as train.py records what the user typed
    with pytest.raises(
        UserError,
        match="train.syllable_rows=seen cannot change when resuming: .* was trained with train.syllable_rows=all",
    ):
        train(hangul_run(*typed), run)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_both_ways_of_scoring_held_rows_agree_and_keep_the_zero_row_out_of_the_gradient(dtype):
    g = torch.Generator().manual_seed(3)
    full = torch.zeros(NUM_SYLLABLES, 16)
    kept = torch.randperm(NUM_SYLLABLES, generator=g)[:300].sort().values
    full[kept] = torch.randn(300, 16, generator=g)
    rows = HeldReadoutRows(full, kept)
    index = torch.randint(0, NUM_SYLLABLES // 28, (40,), generator=g)[:, None] * 28 + torch.arange(28)  # (40, 28)
    assert rows.index[index].eq(rows.pad).any() and rows.index[index].ne(rows.pad).any()
    h = torch.randn(40, 16, generator=g).to(dtype)
    upstream = torch.randn(40, 28, generator=g).to(dtype)
    results = []
    for way in (rows.dot_by_gather, rows.dot_by_product):
        hh = h.clone().requires_grad_()
        out = way(hh, index)
        out.backward(upstream)
        results.append((out.float(), hh.grad.float(), rows.weight.grad.float()))
        assert rows.weight.grad[rows.pad].eq(0).all()  # the shared zero row learns nothing either way
        rows.weight.grad = None
    expected = (h.float()[:, None, :] * full[index]).sum(-1)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=6e-2)
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, **tol)
    torch.testing.assert_close(results[1][0], expected, **tol)
    assert rows.dot(h, index).shape == (40, 28)  # 301 held rows: the product (HeldReadoutRows.dot's choice)


def test_the_row_scores_benchmark_times_both_ways(capsys):
    import json

    from benchmarks import row_scores

    row_scores.main(
        [
            "--held",
            "100,3000",
            "--positions",
            "64",
            "--width",
            "16",
            "--rounds",
            "1",
            "--reps",
            "1",
            "--dtype",
            "float32",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert set(out["held"]) == {"100", "3000"} and out["product_up_to_held_rows"] == 64 * 28
    assert all(v["gather_ms"] > 0 and v["product_ms"] > 0 for v in out["held"].values())
