"""The same seed and config on the CPU give the same loss curve and the same samples."""

from __future__ import annotations

import pytest

from tests.helpers import KOREAN, TINY, cli_all, scalar_tags


@pytest.mark.slow
def test_same_seed_same_loss_curve_and_same_samples(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(KOREAN * 8, encoding="utf-8")
    a, b = tmp_path / "a", tmp_path / "b"
    train = [
        (
            "train.py",
            *TINY,
            "train.max_steps=8",
            "train.eval_interval=4",
            "model.dropout=0.1",
            "seed=11",
            "train.dtype=float32",  # auto times the CPU at each start: two runs side by side may each choose another
            f"data.path={corpus}",
            f"hydra.run.dir={run}",
        )
        for run in (a, b)
    ]
    ra, rb = cli_all(*train)
    assert ra.returncode == 0 and rb.returncode == 0, ra.stderr + rb.stderr

    ta, tb = scalar_tags(a), scalar_tags(b)
    for tag in ("train/loss", "train/grad_norm", "val/loss"):
        assert ta[tag] == tb[tag], tag  # bit for bit, step for step
    assert [s for s, _ in ta["train/loss"]] == list(range(1, 9))
    assert len({v for _, v in ta["train/loss"]}) > 1  # a real curve, not a constant
    evals = [[line for line in r.stdout.splitlines() if line.startswith("step ")] for r in (ra, rb)]
    assert evals[0] and evals[0] == evals[1]

    generate = [
        ("generate.py", "device=cpu", f"ckpt={run}", "prompt=봄이", "max_new_tokens=40", f"seed={seed}")
        for run, seed in ((a, 5), (b, 5), (a, 6))
    ]
    g5a, g5b, g6 = cli_all(*generate)
    assert g5a.returncode == 0, g5a.stderr
    assert g5a.stdout.startswith("봄이") and len(g5a.stdout.strip()) == 42
    assert g5a.stdout == g5b.stdout  # two runs' checkpoints, one seed: the same text
    assert g6.stdout != g5a.stdout  # and the seed does matter
