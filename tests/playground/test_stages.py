"""The playground's hover for hangul runs: each generated syllable's event carries p(initial),
p(medial | initial), p(final | initial, medial) under the distribution it was drawn from, whose product is
the character's `prob`; non-syllables and other tokenizers have no `stages` key."""

import warnings

import pytest
import torch

from inference.checkpoint import Checkpoint, save_checkpoint
from model import AttentionLanguageModel
from playground.stages import FINALS, INITIALS, MEDIALS, syllable_stages
from tests.playground.test_api import app_for, make_run, parse_sse
from tokenizer import KoreanCharTokenizer, KoreanHangulTokenizer

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TEXT = "봄이 오면 꽃이 핀다. 하늘은 맑고 바람은 따뜻하다! ABC 123\n"


def make_hangul_run(folder, head: str):
    """An untrained hangul run (its samples mix syllables and other characters)."""
    tok = KoreanHangulTokenizer.from_text(TEXT)
    torch.manual_seed(4)
    m = AttentionLanguageModel(
        vocab_size=tok.vocab_size,
        context_length=32,
        embedding_size=32,
        head_size=32,
        num_heads=4,
        num_blocks=1,
        head=head,
    )
    if head == "jamo":
        # Untrained, the staged head spreads a syllable's mass over 11,172 of them while each other character
        # keeps a whole stage-1 share, so a top-k sample may hold no syllable at all. LayerNorm's output sums to
        # its bias, so these weights make stage 1 prefer the initials whatever the context.
        with torch.no_grad():
            m.ln_f.bias.fill_(1.0)
            m.lm_head.stage1.weight[:19] = 0.5
            m.lm_head.stage1.weight[19:] = -0.5
    folder.mkdir(parents=True)
    save_checkpoint(Checkpoint(m.config, m.state_dict(), tok.to_dict()), folder / "ckpt.pt")


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    root = tmp_path_factory.mktemp("stages") / "runs"
    make_hangul_run(root / "hangul", "softmax")
    make_hangul_run(root / "staged", "jamo")
    make_run(root / "char", 1, KoreanCharTokenizer)
    with TestClient(app_for(root)) as c:
        yield c


def check_stages(event: dict) -> None:
    initial, medial, final = event["stages"]
    syllable = ord(event["text"]) - 0xAC00
    assert (initial["initial"], medial["medial"], final["final"]) == (
        INITIALS[syllable // 588],
        MEDIALS[syllable // 28 % 21],
        FINALS[syllable % 28],
    )
    product = initial["p"] * medial["p"] * final["p"]
    # `prob` is rounded to 6 decimals in the event; the stages are not.
    assert product == pytest.approx(event["prob"], rel=1e-5, abs=5e-7)
    assert all(0 < s["p"] <= 1 + 1e-9 for s in event["stages"])


@pytest.mark.parametrize("run", ["hangul", "staged"])
@pytest.mark.parametrize(
    "settings",
    [{"temperature": 1.0}, {"temperature": 0.7, "top_k": 50}, {"temperature": 1.2, "top_p": 0.5}, {"temperature": 0}],
)
def test_every_syllable_carries_its_three_stages(client, run, settings):
    got = client.post(
        "/api/generate",
        json={"run": run, "prompt": "봄이", "max_new_tokens": 120, "seed": 5, "stream": False, **settings},
    ).json()
    syllables = [e for e in got["tokens"] if "가" <= e["text"] <= "힣"]
    # Greedy decoding of an untrained model may repeat one non-syllable; sampling always writes syllables.
    assert syllables or not settings["temperature"], "the sample wrote no syllable"
    for event in got["tokens"]:
        if "가" <= event["text"] <= "힣":
            check_stages(event)
        else:
            assert "stages" not in event
        assert {"text", "prob", "top", "pos", "n_tokens"} <= set(event)


def test_the_stream_carries_them_too_and_a_char_run_does_not(client):
    body = {"prompt": "하늘", "max_new_tokens": 40, "seed": 2, "temperature": 1.0}
    events = parse_sse(client.post("/api/generate", json={"run": "hangul", **body}).text)
    chars = [data for kind, data in events if kind == "char"]
    assert any("stages" in e for e in chars)
    for e in chars:
        if "stages" in e:
            check_stages(e)
    plain = client.post("/api/generate", json={"run": "char", **body, "stream": False}).json()
    assert plain["tokens"] and not any("stages" in e for e in plain["tokens"])


def test_stages_normalise_and_multiply_back():
    probs = torch.softmax(torch.randn(11200, generator=torch.Generator().manual_seed(0)) * 3, 0)
    grid = probs[1:11173].double().reshape(19, 21, 28)
    for token_id in (1, 2, 589, 11172, 5000):
        initial, medial, final = syllable_stages(probs, token_id)
        assert initial["p"] * medial["p"] * final["p"] == pytest.approx(float(probs[token_id]), rel=1e-9)
        i, m = (token_id - 1) // 588, (token_id - 1) // 28 % 21
        assert initial["p"] == pytest.approx(float(grid[i].sum()), rel=1e-12) and initial["p"] <= 1
        medials = [syllable_stages(probs, 1 + i * 588 + k * 28)[1]["p"] for k in range(21)]
        finals = [syllable_stages(probs, 1 + i * 588 + m * 28 + k)[2]["p"] for k in range(28)]
        assert sum(medials) == pytest.approx(1, rel=1e-9) and sum(finals) == pytest.approx(1, rel=1e-9)
    assert syllable_stages(probs, 1)[2]["final"] == "" and syllable_stages(probs, 11172)[0]["initial"] == "ㅎ"
