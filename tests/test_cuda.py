"""The CUDA path: AMP, fused kernels, torch.compile. Skipped where no GPU is present (as in CI)."""

import pytest
import torch

from model.streaming import stream
from tests.helpers import assert_bf16_cached_matches_uncached, cli, tiny_model, train_compiled

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def make(attention="fused"):
    return tiny_model(attention, vocab_size=300, context_length=64, embedding_size=128, head_size=128).cuda()


def test_heads_and_fused_agree_under_bf16_autocast():
    a, b = make("heads"), make("fused")
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 300, (4, 64), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        la, lb = a(idx)[0].float(), b(idx)[0].float()
    assert (la - lb).norm() / la.norm() < 2e-2


@pytest.fixture
def exact_fp32():
    """TF32 (switched on by common.device for speed) would round fp32 products to 10-bit mantissas."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.parametrize("attention", ["heads", "fused"])
def test_cached_generation_matches_uncached_on_cuda(attention, exact_fp32):
    m = make(attention)
    idx = torch.randint(0, 300, (2, 5), device="cuda")
    a = [lg for _, lg in stream(m, idx, 100, temperature=0, use_cache=True)]
    b = [lg for _, lg in stream(m, idx, 100, temperature=0, use_cache=False)]
    assert all(torch.allclose(x, y, atol=1e-4) for x, y in zip(a, b, strict=True))


def test_cached_generation_matches_uncached_under_bf16_autocast_on_cuda():
    m = make()
    idx = torch.randint(0, 300, (2, 5), device="cuda")
    assert_bf16_cached_matches_uncached(m, idx, 100, "cuda")


def test_train_on_cuda_with_bf16_and_compile(tmp_path):
    run, payload = train_compiled(tmp_path, "device=cuda", "train.dtype=auto", "train.max_steps=20",
                                  "train.eval_interval=10", "train.eval_steps=2")
    assert payload.step == 20
    g = cli("generate.py", f"ckpt={run}", "prompt=안녕", "max_new_tokens=20", "device=cuda")
    assert g.returncode == 0 and g.stdout.startswith("안녕"), g.stderr


def test_the_hangul_model_trains_with_held_rows_and_samples_on_cuda(tmp_path, corpus):
    run = tmp_path / "run"
    r = cli("train.py", "model=tiny", "device=cuda", "train.dtype=auto", "data.tokenizer=hangul",
            "model.embedding=jamo", "model.head=jamo", f"data.path={corpus}", "train.max_steps=20",
            "train.eval_interval=10", "train.eval_steps=2", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-3000:]
    g = cli("generate.py", f"ckpt={run}", "prompt=똠양꿍", "max_new_tokens=20", "device=cuda", "top_p=0.9")
    assert g.returncode == 0 and g.stdout.startswith("똠양꿍"), g.stderr
