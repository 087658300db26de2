"""train.py and generate.py end to end, through their real command lines."""

import re

import pytest

from tests.helpers import ROOT, cli, scalar_tags

pytestmark = pytest.mark.slow
TINY = ["model=tiny", "train.batch_size=8", "train.eval_steps=2", "train.log_interval=5", "train.sample_chars=20"]


def test_train_then_generate(tmp_path):
    run = tmp_path / "run"
    r = cli("train.py", *TINY, "train.max_steps=30", "train.eval_interval=10", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr
    assert "val bpc" in r.stdout and "--- sample ---" in r.stdout
    for name in ("ckpt.pt", "best.pt", "vocab.json", ".hydra/config.yaml", ".hydra/overrides.yaml"):
        assert (run / name).exists(), name
    tags = scalar_tags(run)
    for tag in ("train/loss", "val/loss", "val/bpc", "train/lr", "train/tokens_per_sec", "train/grad_norm"):
        assert tag in tags, tag
    assert [s for s, _ in tags["val/loss"]] == [10, 20, 30]
    assert "train:" in r.stderr and "30/30" in r.stderr  # the tqdm bar

    args = ("generate.py", f"ckpt={run}", "prompt=안녕", "max_new_tokens=50", "seed=1")
    g1, g2 = cli(*args), cli(*args)
    assert g1.returncode == 0, g1.stderr
    assert g1.stdout.startswith("안녕") and len(g1.stdout.strip()) == 52
    assert re.search("[가-힣]", g1.stdout[2:])
    assert g1.stdout == g2.stdout  # same seed, same text
    g3 = cli(
        "generate.py",
        f"ckpt={run / 'best.pt'}",
        "prompt=안녕",
        "max_new_tokens=50",
        "seed=2",
        "num_samples=2",
        "use_cache=false",
        "top_k=5",
        "top_p=0.9",
    )
    assert g3.returncode == 0, g3.stderr
    assert g3.stdout.count("안녕") >= 2


def test_default_run_directory_is_named_by_time_and_overrides(tmp_path):
    r = cli(str(ROOT / "train.py"), *TINY, "train.max_steps=2", "train.eval_interval=2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1
    name = runs[0].name
    assert re.match(r"\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}_", name) and "model-tiny" in name and "/" not in name
    g = cli(str(ROOT / "generate.py"), "max_new_tokens=5", cwd=tmp_path)  # newest run under runs/
    assert g.returncode == 0, g.stderr


def test_invalid_config_is_refused_before_any_work(tmp_path):
    r = cli("train.py", "model.head_size=30", "model.num_heads=4", f"hydra.run.dir={tmp_path / 'x'}")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "error: model.head_size=30 is not divisible by model.num_heads=4; "
        "pick a head_size that is a multiple of num_heads"
    )
    assert not (tmp_path / "x" / "ckpt.pt").exists()
