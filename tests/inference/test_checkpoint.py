import pytest
import torch

from inference.checkpoint import (
    VERSION,
    Checkpoint,
    load_checkpoint,
    save_checkpoint,
    strip_compile_prefix,
)
from inference.loading import load_run
from inference.run_files import resolve_checkpoint
from model import AttentionLanguageModel
from tests.helpers import cli
from tokenizer import KoreanCharTokenizer


def test_checkpoint_round_trip_gives_identical_logits(tmp_path):
    tok = KoreanCharTokenizer.from_text("가나다라마바사 아자차카타파하.")
    torch.manual_seed(0)
    m = AttentionLanguageModel(
        vocab_size=tok.vocab_size, context_length=8, embedding_size=16, head_size=16, num_heads=2, num_blocks=1
    ).eval()
    save_checkpoint(Checkpoint(m.config, m.state_dict(), tok.to_dict(), tokens_per_char=1.5), tmp_path / "ckpt.pt")
    assert not list(tmp_path.glob("*.tmp"))
    assert resolve_checkpoint(tmp_path) == tmp_path / "ckpt.pt"
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert ckpt.model_config == m.config and ckpt.tokens_per_char == 1.5 and ckpt.training is None
    run = load_run(str(tmp_path), torch.device("cpu"))
    again, tok2 = run.model, run.tokenizer
    idx = torch.tensor([tok.encode("가나다라").tolist()])
    assert torch.equal(m(idx)[0], again(idx)[0])
    assert tok2.chars == tok.chars


def test_compiled_prefix_is_stripped():
    sd = {"_orig_mod.lm_head.weight": 1, "module.ln_f.bias": 2, "blocks.0.x": 3}
    assert strip_compile_prefix(sd) == {"lm_head.weight": 1, "ln_f.bias": 2, "blocks.0.x": 3}


def test_newest_run_is_found(tmp_path):
    import os
    import time

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "ckpt.pt").write_bytes(b"x")
        time.sleep(0.01)
    os.utime(tmp_path / "a" / "ckpt.pt", (time.time() + 5, time.time() + 5))
    assert resolve_checkpoint(None, runs_root=tmp_path) == tmp_path / "a" / "ckpt.pt"


# -- checkpoints written before the typed record (format version 1: one flat dict) --------------------------


def _write_v1_checkpoint(run_dir, corpus, kind: str) -> None:
    """A checkpoint laid out exactly as version 1 wrote it, for a model over `corpus` with a `kind` tokenizer."""
    from data.corpus import load_corpus
    from data.sampler import BatchSampler
    from inference.checkpoint import FORMAT
    from training.checkpoints import capture_rng
    from training.optim.factory import make_optimizer

    data = load_corpus(corpus, cache_dir=run_dir.parent / "cache", tokenizer_kind=kind)
    settings = dict(
        vocab_size=data.tokenizer.vocab_size,
        context_length=16,
        embedding_size=32,
        head_size=32,
        num_heads=4,
        num_blocks=2,
        dropout=0.0,
        attention="fused",
        tie_weights=False,
    )
    torch.manual_seed(0)
    model = AttentionLanguageModel(**settings)
    optimizer = make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), torch.device("cpu"))
    sampler = BatchSampler(data.tokens, 16, 2, "cpu", seed=1337)
    run_dir.mkdir(parents=True)
    torch.save(
        {
            "format": FORMAT,
            "version": 1,
            "model": model.state_dict(),
            "model_config": settings,
            "tokenizer": data.tokenizer.to_dict(),
            "step": 3,
            "optimizer": optimizer.state_dict(),
            "scaler": {},
            "best_val_loss": 5.0,
            "val_loss": 5.1,
            "elapsed_seconds": 1.5,
            "rng": capture_rng(),
            "sampler": sampler.state_dict(),
            "world_size": 1,
            "tokens_per_char": len(data.tokens) / data.num_chars,
            "config": {"seed": 1337},
        },
        run_dir / "ckpt.pt",
    )


@pytest.mark.parametrize("kind", ["char", "jamo"])
def test_version_1_checkpoints_load_sample_and_keep_their_training_state(tmp_path, small_corpus, kind):
    run = tmp_path / "old"
    _write_v1_checkpoint(run, small_corpus, kind)
    ckpt = load_checkpoint(run / "ckpt.pt")
    assert ckpt.model_config.context_length == 16 and ckpt.model_config.attention == "fused"
    assert ckpt.step == 3 and ckpt.training.best_val_loss == 5.0 and ckpt.training.world_size == 1
    assert (ckpt.tokens_per_char > 1.5) == (kind == "jamo")
    r = cli("generate.py", f"ckpt={run}", "prompt=오늘은", "max_new_tokens=12", "seed=1", "device=cpu")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("오늘은") and len(r.stdout.strip()) > len("오늘은")


def test_a_version_1_checkpoint_resumes_under_the_new_code(tmp_path, small_corpus):
    from tests.helpers import train_job
    from training.trainer import train

    run = tmp_path / "old"
    _write_v1_checkpoint(run, small_corpus, "char")
    result = train(
        train_job(
            tmp_path,
            f"data.path={small_corpus}",
            f"train.resume={run}",
            "train.max_steps=5",
            "train.eval_interval=5",
            "model.context_length=16",
        ),
        run,
    )
    assert result.step == 5
    assert load_checkpoint(run / "ckpt.pt").to_payload()["version"] == VERSION


def test_a_checkpoint_without_training_state_samples_but_does_not_resume(tmp_path, small_corpus):
    from common.errors import UserError
    from tests.helpers import train_job
    from training.trainer import train

    tok = KoreanCharTokenizer.from_text(small_corpus.read_text(encoding="utf-8"))
    m = AttentionLanguageModel(
        vocab_size=tok.vocab_size, context_length=16, embedding_size=32, head_size=32, num_heads=4, num_blocks=1
    )
    (tmp_path / "run").mkdir()
    save_checkpoint(Checkpoint(m.config, m.state_dict(), tok.to_dict()), tmp_path / "run" / "ckpt.pt")
    r = cli("generate.py", f"ckpt={tmp_path / 'run'}", "prompt=오늘", "max_new_tokens=5", "device=cpu")
    assert r.returncode == 0, r.stderr
    with pytest.raises(UserError, match="holds no training state .* can still be sampled"):
        train(train_job(tmp_path, f"data.path={small_corpus}", f"train.resume={tmp_path / 'run'}"), tmp_path / "run")


def test_a_mapped_load_gives_the_same_weights_and_a_legacy_file_still_loads(tmp_path):
    """`mmap=True` (the playground's run list) reads the same checkpoint; a file in torch's legacy
    (non-zip) format, which cannot be mapped, is read the ordinary way."""
    tok = KoreanCharTokenizer.from_text("가나다라마바사")
    m = AttentionLanguageModel(
        vocab_size=tok.vocab_size, context_length=8, embedding_size=16, head_size=16, num_heads=2, num_blocks=1
    )
    ckpt = Checkpoint(m.config, m.state_dict(), tok.to_dict(), tokens_per_char=1.0)
    save_checkpoint(ckpt, tmp_path / "ckpt.pt")
    mapped = load_checkpoint(tmp_path / "ckpt.pt", mmap=True)
    assert all(torch.equal(v, mapped.model[k]) for k, v in m.state_dict().items())
    payload = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    torch.save(payload, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    legacy = load_checkpoint(tmp_path / "legacy.pt", mmap=True)
    assert all(torch.equal(v, legacy.model[k]) for k, v in m.state_dict().items())
