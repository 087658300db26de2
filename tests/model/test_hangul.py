"""data.tokenizer=hangul and model.embedding=jamo: every syllable representable, ids that round-trip and match
the char tokenizer's reading of every encoding, syllable vectors composed from their jamo."""

from __future__ import annotations

import codecs
import json
import unicodedata

import pytest
import torch

from common.errors import UserError
from data.corpus import load_corpus
from model import AttentionLanguageModel
from model.hangul.jamo_embedding import NUM_PARTS, syllable_parts
from tests.helpers import KOREAN, TINY, cli
from tokenizer import KoreanCharTokenizer, KoreanHangulTokenizer, tokenizer_from_dict

MIXED = KOREAN + "ㅋㅋㅋ ㅠㅠ 漢字 ABC xyz 123 — «»\t\n"


def test_every_syllable_is_a_token_whether_or_not_the_corpus_holds_it():
    tok = KoreanHangulTokenizer.from_text("가나다 abc")
    assert tok.encode("가").tolist() == [1] and tok.encode("힣").tolist() == [11172]
    unseen = "똠뷁쀍"
    assert 0 not in tok.encode(unseen).tolist() and tok.decode(tok.encode(unseen)) == unseen
    assert KoreanCharTokenizer.from_text("가나다 abc").encode(unseen).tolist() == [0, 0, 0]
    assert tok.encode("€").tolist() == [0]  # other characters come from the corpus only


def test_round_trips_and_the_same_characters_as_char():
    tok, char = KoreanHangulTokenizer.from_text(MIXED), KoreanCharTokenizer.from_text(MIXED)
    for text in (MIXED, unicodedata.normalize("NFD", MIXED), "ㅋㅋ 가\u0301"):
        assert tok.decode(tok.encode(text)) == char.decode(char.encode(text))
    assert tok.decode(tok.encode(MIXED)) == MIXED
    assert tokenizer_from_dict(json.loads(json.dumps(tok.to_dict()))).fingerprint() == tok.fingerprint()
    assert "ㅋ" in tok.to_dict()["chars"] and "가" not in tok.to_dict()["chars"]  # jamo are ordinary characters


def test_extending_keeps_every_id():
    tok = KoreanHangulTokenizer.from_text(MIXED)
    grown = tok.extended(["새 글자 € 와 ☃"])
    assert grown.added == ["€", "☃"] and grown.vocab_size == tok.vocab_size + 2
    assert grown.encode(MIXED).tolist() == tok.encode(MIXED).tolist()
    assert tokenizer_from_dict(grown.to_dict()).encode("€☃").tolist() == grown.encode("€☃").tolist()


@pytest.mark.parametrize("encoding", ["utf-8-sig", "cp949", "nfd", "utf-16"])
def test_every_encoding_gives_the_ids_of_utf8(tmp_path, encoding):
    text = KOREAN * 2
    plain = tmp_path / "plain.txt"
    plain.write_text(text, encoding="utf-8")
    other = tmp_path / f"{encoding}.txt"
    if encoding == "nfd":
        other.write_text(unicodedata.normalize("NFD", text), encoding="utf-8")
    elif encoding == "utf-16":
        other.write_bytes(codecs.BOM_UTF16_LE + text.encode("utf-16-le"))
    else:
        other.write_text(text, encoding=encoding)
    a = load_corpus(plain, cache_dir=tmp_path / "c1", tokenizer_kind="hangul")
    b = load_corpus(other, cache_dir=tmp_path / "c2", tokenizer_kind="hangul")
    assert a.tokens.tolist() == b.tokens.tolist() and a.tokenizer.fingerprint() == b.tokenizer.fingerprint()


def _jamo_model(**kw) -> AttentionLanguageModel:
    torch.manual_seed(0)
    return AttentionLanguageModel(
        vocab_size=11200,
        context_length=16,
        embedding_size=32,
        head_size=32,
        num_heads=2,
        num_blocks=1,
        embedding="jamo",
        **kw,
    ).eval()


def test_a_syllable_starts_as_the_sum_of_its_jamo():
    m = _jamo_model()
    tok = KoreanHangulTokenizer.from_text("")
    ids = torch.tensor(tok.encode("가각나낙").tolist())
    v = m.token_embedding(ids)
    parts = m.token_embedding.parts.weight
    table = syllable_parts(11200)
    assert torch.allclose(v, parts[table[ids]].sum(1))  # the syllable's own rows start at zero
    # 가 - 각 = 나 - 낙: the difference of the finals, whatever the initial
    assert torch.allclose(v[0] - v[1], v[2] - v[3], atol=1e-6) and not torch.allclose(v[0], v[1])
    assert torch.count_nonzero(parts[NUM_PARTS]) == 0 and table[11190].tolist() == [NUM_PARTS] * 3


def test_cached_generation_gives_the_uncached_tokens_with_jamo_embeddings():
    m = _jamo_model(position="rope", norm="rmsnorm")
    prompt = torch.randint(0, 11200, (2, 3))
    runs = [
        m.generate(prompt, 30, temperature=1.0, use_cache=c, generator=torch.Generator().manual_seed(1))
        for c in (True, False)
    ]
    assert torch.equal(*runs)


def test_a_vocabulary_without_the_syllable_block_is_refused():
    with pytest.raises(ValueError, match="data.tokenizer=hangul"):
        AttentionLanguageModel(
            vocab_size=100, context_length=8, embedding_size=8, head_size=8, num_heads=1, num_blocks=1, embedding="jamo"
        )


def test_train_generate_and_evaluate_a_hangul_run(tmp_path, corpus):
    run = tmp_path / "run"
    r = cli(
        "train.py",
        *TINY,
        "data.tokenizer=hangul",
        "model.embedding=jamo",
        "model.head=jamo",
        f"data.path={corpus}",
        "train.max_steps=20",
        f"hydra.run.dir={run}",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    g = cli("generate.py", f"ckpt={run}", "prompt=똠양꿍", "max_new_tokens=20")  # syllables the corpus lacks
    assert g.returncode == 0 and g.stdout.startswith("똠양꿍"), g.stderr
    e = json.loads(cli("evaluate.py", f"ckpt={run}", f"data.path={corpus}", "progress=false").stdout)
    assert e["tokenizer"] == "hangul" and e["unknown_chars"] == 0
    bad = cli(
        "train.py",
        *TINY,
        "model.embedding=jamo",
        f"data.path={corpus}",
        "train.max_steps=1",
        f"hydra.run.dir={tmp_path / 'bad'}",
    )
    assert bad.returncode == 2 and "data.tokenizer=hangul" in bad.stderr and "Traceback" not in bad.stderr


# -- model.head=jamo -----------------------------------------------------------------------------------------


def _head(seed: int = 0, initials: str = "pairs"):
    from model.hangul.jamo_head import JamoHead

    torch.manual_seed(seed)
    head = JamoHead(11200, 32, initials)
    with torch.no_grad():
        for p in head.parameters():
            p.normal_(0, 0.5)  # far from uniform, so a stage that mixed up its parts would show
    return head


@pytest.mark.parametrize(
    "device",
    ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"))],
)
@pytest.mark.parametrize("initials", ["pairs", "linear"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_staged_distribution_sums_to_one_and_scores_what_it_samples(dtype, initials, device):
    head = _head(initials=initials).to(device)
    h = torch.randn(6, 32).to(device)
    # <unk>, 가, 힣, the first other id, the last, 뉴
    targets = torch.tensor([0, 1, 11172, 11173, 11199, 5000], device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        joint = head.joint(h)
        losses = head.token_losses(h, targets)
    assert joint.dtype == torch.float32 and joint.shape == (6, 11200)
    assert torch.allclose(torch.logsumexp(joint, -1), torch.zeros(6, device=device), atol=1e-5)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    assert torch.allclose(losses, -joint[torch.arange(6), targets], atol=tol, rtol=tol)


def test_an_initial_is_as_likely_as_the_pairs_it_opens():
    """With its own stage-1 rows and stage 2's shared part at zero, the pairs version's first two stages are one
    softmax over the 399 (initial, medial) rows and the other characters; the linear version is not."""
    from model.hangul.jamo_embedding import NUM_FINALS, NUM_INITIALS, NUM_MEDIALS

    for initials, flat in (("pairs", True), ("linear", False)):
        head = _head(3, initials)
        with torch.no_grad():
            head.stage1.weight[:NUM_INITIALS] = 0
            head.medial_out.weight.zero_()
            h = torch.randn(2, 32)
            joint = head.joint(h)
            pair_p = joint[:, 1:11173].exp().view(2, NUM_INITIALS * NUM_MEDIALS, NUM_FINALS).sum(-1)  # (2, 399)
            scores = torch.cat([h @ head.medial_rows.T, head.stage1(h)[:, NUM_INITIALS:]], dim=-1)
            expected = torch.softmax(scores, -1)[:, : NUM_INITIALS * NUM_MEDIALS]
        assert torch.allclose(pair_p, expected, atol=1e-6) == flat


def test_a_staged_head_saved_before_the_choice_of_initials_rebuilds_as_it_was():
    from model.config import ModelConfig

    old = {k: v for k, v in ModelConfig(vocab_size=11200, head="jamo").to_dict().items() if k != "jamo_initials"}
    assert ModelConfig.from_dict(old).jamo_initials == "linear"
    assert ModelConfig.from_dict({**old, "head": "softmax"}).jamo_initials == "pairs"  # no staged head: the default
    assert ModelConfig(head="jamo").jamo_initials == "pairs"
    with pytest.raises(UserError, match="jamo_initials"):
        ModelConfig(jamo_initials="flat")


def test_sampled_frequencies_follow_the_scored_distribution():
    from tests.helpers import draw

    head = _head(1)
    with torch.no_grad():
        joint = head.joint(torch.randn(1, 32))
    p = joint.exp()[0]
    n = 40000
    draws = draw(joint.expand(n, -1).contiguous(), 1.0, None, None, torch.Generator().manual_seed(0))
    counts = torch.bincount(draws.view(-1), minlength=11200).double()
    top = p.topk(20).indices
    expected = n * p[top].double()
    sigma = (expected * (1 - p[top].double())).sqrt()
    assert ((counts[top] - expected).abs() <= 5 * sigma + 3).all(), (counts[top], expected)
    assert counts.sum() == n


def test_cached_generation_and_scoring_with_the_staged_head():
    m = _jamo_model(head="jamo")
    prompt = torch.randint(0, 11200, (2, 3))
    runs = [
        m.generate(prompt, 25, temperature=0.9, top_p=0.9, use_cache=c, generator=torch.Generator().manual_seed(2))
        for c in (True, False)
    ]
    assert torch.equal(*runs)
    x, y = torch.randint(0, 11200, (2, 12)), torch.randint(0, 11200, (2, 12))
    with torch.no_grad():
        per_token = m.token_losses(x, y)
        joint, _ = m(x)
        _, loss = m(x, y)
    assert torch.allclose(per_token, -joint.gather(-1, y[..., None])[..., 0], atol=1e-4)
    assert torch.allclose(loss, per_token.mean())


def test_the_staged_head_grows_with_fine_tuning():
    from training.init_from import grown_state

    m = _jamo_model(head="jamo")
    state = grown_state(m.state_dict(), 11202, tied=False)
    bigger = AttentionLanguageModel(m.config.with_vocab(11202))
    bigger.load_state_dict(state)
    assert torch.equal(state["lm_head.stage1.weight"][-1], state["lm_head.stage1.weight"][19])  # as <unk>


def test_the_staged_head_is_refused_where_it_cannot_work(tmp_path, corpus):
    from common.errors import UserError
    from model.config import ModelConfig

    with pytest.raises(UserError, match="tie_weights"):
        ModelConfig(head="jamo", tie_weights=True)
    r = cli(
        "train.py",
        *TINY,
        "model.head=jamo",
        f"data.path={corpus}",
        "train.max_steps=1",
        f"hydra.run.dir={tmp_path / 'bad'}",
    )
    assert r.returncode == 2 and "model.head=jamo" in r.stderr and "data.tokenizer=hangul" in r.stderr


@pytest.mark.parametrize("initials", ["pairs", "linear"])
def test_a_batch_without_syllables_still_gives_every_staged_parameter_a_gradient(initials):
    """DDP needs every parameter in each rank's graph, even when a micro-batch holds no Hangul at all."""
    head = _head(initials=initials)
    h = torch.randn(2, 3, 32, requires_grad=True)
    targets = torch.tensor([[0, 11173, 11199], [11180, 11173, 0]])  # <unk> and other characters only
    head.token_losses(h, targets).mean().backward()
    assert all(p.grad is not None for p in head.parameters())
    assert torch.isfinite(h.grad).all()
