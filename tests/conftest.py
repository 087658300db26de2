import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_CORPUS = ROOT.parent / "shared" / "corpora" / "koconovel_dev.txt"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture
def shared_corpus() -> Path:
    if not SHARED_CORPUS.is_file():
        pytest.skip("../shared/corpora/koconovel_dev.txt is not present")
    return SHARED_CORPUS


@pytest.fixture
def small_corpus(tmp_path) -> Path:
    """A few KB of Korean text written for the tests (ours, not from any corpus)."""
    text = (
        "오늘은 비가 조금 내렸다. 우산을 챙기지 않아서 편의점에 들러 하나 샀다.\n"
        "버스를 기다리는 동안 친구에게 문자를 보냈다. \"곧 도착해!\"\n"
        "저녁에는 된장찌개를 끓였다. 두부 반 모와 애호박, 양파를 넣었다.\n"
        "Wi-Fi가 자꾸 끊겨서 공유기를 다시 켰더니 괜찮아졌다. 오후 9시 30분.\n"
    )
    p = tmp_path / "corpus.txt"
    p.write_text(text * 30, encoding="utf-8")
    return p


def run_script(*args: str, timeout: float = 300, env: dict | None = None, cwd: Path | None = None):
    """Run one of the entry scripts with the current interpreter, as a user would."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, *args], cwd=cwd or ROOT, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def train_compiled(tmp_path: Path, *overrides: str) -> tuple[Path, dict]:
    """`train.py model=tiny train.compile=true <overrides>` into tmp_path/run -> (run dir, its checkpoint).

    Checks that it succeeded and that the compile (`_orig_mod.`) and DDP (`module.`) wrappers' prefixes never
    reach the saved state dict."""
    from training.checkpoint import load_checkpoint

    run = tmp_path / "run"
    r = run_script("train.py", "model=tiny", "train.compile=true", *overrides, f"hydra.run.dir={run}",
                   f"data.cache_dir={tmp_path / 'cache'}", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    payload = load_checkpoint(run / "ckpt.pt")
    assert not any(k.startswith(("_orig_mod.", "module.")) for k in payload["model"])
    return run, payload


def assert_bf16_cached_matches_uncached(model, idx, steps: int, device_type: str) -> None:
    """Cached and uncached generation under bf16 autocast give logits within 2% (relative) at every step,
    up to the first step where a bf16 near-tie made them pick different tokens (later inputs differ)."""
    import torch

    with torch.autocast(device_type, dtype=torch.bfloat16):
        a = list(model.stream(idx, steps, temperature=0, use_cache=True))
        b = list(model.stream(idx, steps, temperature=0, use_cache=False))
    for (ta, x), (tb, y) in zip(a, b, strict=True):
        assert (x - y).norm() / y.norm() < 2e-2
        if not torch.equal(ta, tb):
            break
