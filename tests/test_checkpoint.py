import torch

from inference.checkpoint import Checkpoint, load_checkpoint, resolve_checkpoint, save_checkpoint, strip_compile_prefix
from inference.loading import load_run
from model import AttentionLanguageModel
from tokenizer import KoreanCharTokenizer


def test_checkpoint_round_trip_gives_identical_logits(tmp_path):
    tok = KoreanCharTokenizer.from_text("가나다라마바사 아자차카타파하.")
    torch.manual_seed(0)
    m = AttentionLanguageModel(vocab_size=tok.vocab_size, context_length=8, embedding_size=16, head_size=16,
                               num_heads=2, num_blocks=1).eval()
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
