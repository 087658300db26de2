"""What the notebooks build by hand is what the package computes: each notebook's functions and classes (imported
from its code cells, nothing else of it run) against the package's, with the same weights, so that a notebook cannot
drift from the code it teaches. Both languages are checked (their code is the same: notebooks/test_notebooks.py)."""

from __future__ import annotations

import copy
import functools
import math

import numpy as np
import pytest
import torch
from torch import nn

from data.sampler import BatchSampler
from model import AttentionLanguageModel
from model.config import ModelConfig
from model.counts import num_parameters
from tests.helpers import KOREAN
from tests.notebooks.notebook_tools import LANGUAGES, definitions, notebook_path
from tokenizer import KoreanCharTokenizer, build_tokenizer

pytestmark = pytest.mark.parametrize("lang", LANGUAGES)
SIZES = [
    dict(context_length=16, embedding_size=32, head_size=32, num_heads=4, num_blocks=2),
    dict(context_length=8, embedding_size=24, head_size=48, num_heads=3, num_blocks=1),
    dict(context_length=12, embedding_size=16, head_size=16, num_heads=1, num_blocks=3),
]


@functools.cache
def notebook(lang: str, number: str) -> dict:
    name = {
        "01": "01_characters_to_batches",
        "02": "02_self_attention",
        "03": "03_heads_block_gpt",
        "04": "04_train_and_sample",
        "05": "05_beyond_the_lecture",
    }[number]
    return definitions(notebook_path(lang, name))


# -- 01: characters to batches --------------------------------------------------------------------------------------


def test_01_the_hand_made_vocabulary_encodes_and_decodes_as_the_tokenizer(lang):
    nb = notebook(lang, "01")
    vocab = nb["build_vocabulary"](KOREAN)
    tokenizer = KoreanCharTokenizer.from_text(KOREAN)
    assert vocab[0] == "<unk>" and len(vocab) == tokenizer.vocab_size
    text = "봄이 오면 뷁 🐯 강가에\n" + KOREAN[:80]
    ids = nb["encode"](text, vocab)
    assert ids == tokenizer.encode(text).tolist() and ids.count(0) == 2
    assert nb["decode"](ids, vocab) == tokenizer.decode(ids)
    decomposed = "\u1112\u1161\u11ab\uae00"  # 한 spelled in jamo, then 글: NFC first, as the tokenizer does
    assert nb["encode"](decomposed, vocab) == tokenizer.encode(decomposed).tolist()


def test_01_the_notebooks_ids_and_first_batch_are_the_default_training_runs(lang, tmp_path):
    """Notebook 01 says: with CONTEXT_LENGTH = 128 and BATCH_SIZE = 8, its first batch is `python train.py`'s."""
    from data.corpus import EMBEDDED_CORPUS
    from data.text import read_text
    from tests.helpers import config_object
    from training.session import setup

    nb = notebook(lang, "01")
    text = read_text(EMBEDDED_CORPUS)
    vocab = nb["build_vocabulary"](text)
    data = np.array(nb["encode"](text, vocab), dtype=np.int64)
    job = config_object("train", "device=cpu", f"data.cache_dir={tmp_path / 'cache'}")  # every default
    s, _ = setup(job, tmp_path / "run")
    assert vocab[1:] == s.tokenizer.chars
    assert np.array_equal(data[: len(s.train_tokens)], s.train_tokens)
    assert np.array_equal(data[len(s.train_tokens) :], s.val_tokens)
    x, y = nb["random_windows"](data[: len(s.train_tokens)], 128, 8, nb["make_rng"](1337))
    sx, sy = s.sampler.next_batch()
    assert torch.equal(sx, torch.from_numpy(x)) and torch.equal(sy, torch.from_numpy(y))


@pytest.mark.parametrize("seed,context_length,batch_size", [(1337, 8, 4), (0, 128, 8), (7, 1, 1)])
def test_01_the_hand_made_windows_are_the_batch_samplers(lang, seed, context_length, batch_size):
    nb = notebook(lang, "01")
    tokens = np.arange(1000, dtype=np.int64) % 97
    sampler = BatchSampler(tokens, context_length, batch_size, seed=seed)
    rng = nb["make_rng"](seed)
    for _ in range(5):
        x, y = nb["random_windows"](tokens, context_length, batch_size, rng)
        sx, sy = sampler.next_batch()
        assert torch.equal(sx, torch.from_numpy(x)) and torch.equal(sy, torch.from_numpy(y))


# -- 02: self-attention from scratch --------------------------------------------------------------------------------


@pytest.mark.parametrize("embedding_size,head_dim,context_length", [(32, 8, 8), (16, 16, 5), (12, 4, 20)])
def test_02_the_hand_made_head_is_heads_with_the_same_weights(lang, embedding_size, head_dim, context_length):
    from model.attention import Head

    nb = notebook(lang, "02")
    torch.manual_seed(0)
    mine = nb["SelfAttentionHead"](embedding_size, head_dim, context_length, dropout=0.2).eval()
    theirs = Head(embedding_size, head_dim, context_length, dropout=0.2).eval()
    theirs.load_state_dict(mine.state_dict())  # strict: the same parameter names
    x = torch.randn(3, context_length, embedding_size)
    with torch.no_grad():
        torch.testing.assert_close(mine(x), theirs(x))
        torch.testing.assert_close(mine(x[:, :2]), theirs(x[:, :2]))  # shorter than the context
    torch.testing.assert_close(nb["softmax_by_hand"](x), torch.softmax(x, dim=-1))


# -- 03: many heads, a block, a GPT ---------------------------------------------------------------------------------


def config_of(sizes: dict, vocab_size: int = 40, **switches) -> ModelConfig:
    return ModelConfig(vocab_size=vocab_size, dropout=0.0, **sizes, **switches)


@pytest.mark.parametrize("sizes", SIZES)
def test_03_hand_made_multi_head_attention_both_ways_is_the_packages(lang, sizes):
    from model.attention import MultiHeadAttention

    nb = notebook(lang, "03")
    c = config_of(sizes)
    torch.manual_seed(1)
    mine = nb["MultiHeadAttentionByHand"](c.embedding_size, c.head_size, c.num_heads, c.context_length).eval()
    x = torch.randn(2, c.context_length, c.embedding_size)
    with torch.no_grad():
        torch.testing.assert_close(nb["fused_attention_by_hand"](x, mine), mine(x))
        for attention in ("heads", "fused"):
            theirs = MultiHeadAttention(
                c.embedding_size, c.head_size, c.num_heads, c.context_length, attention=attention
            ).eval()
            theirs.load_state_dict(mine.state_dict())
            torch.testing.assert_close(mine(x), theirs(x))


@pytest.mark.parametrize("sizes", SIZES)
def test_03_the_hand_made_block_and_layer_norm_are_the_packages(lang, sizes):
    from model.block import Block

    nb = notebook(lang, "03")
    c = config_of(sizes)
    torch.manual_seed(2)
    mine = nb["BlockByHand"](c.embedding_size, c.head_size, c.num_heads, c.context_length).eval()
    theirs = Block(c).eval()
    theirs.load_state_dict(mine.state_dict())
    x = torch.randn(2, c.context_length, c.embedding_size)
    with torch.no_grad():
        torch.testing.assert_close(mine(x), theirs(x))
        norm = nn.LayerNorm(c.embedding_size)
        nn.init.normal_(norm.weight), nn.init.normal_(norm.bias)
        torch.testing.assert_close(nb["layer_norm_by_hand"](x, norm.weight, norm.bias), norm(x))


@pytest.mark.parametrize("sizes", SIZES)
def test_03_the_hand_made_gpt_gives_the_models_logits_loss_and_parameter_count(lang, sizes):
    nb = notebook(lang, "03")
    c = config_of(sizes)
    torch.manual_seed(3)
    # The lecture's module per head names its parameters as the hand-built model does; the fused default may hold
    # them otherwise, and loads either naming.
    model = AttentionLanguageModel(config_of(sizes, attention="heads")).eval()
    mine = nb["GPTByHand"](
        c.vocab_size, c.context_length, c.embedding_size, c.head_size, c.num_heads, c.num_blocks
    ).eval()
    mine.load_state_dict(model.state_dict())  # strict both ways: the same names and shapes
    model.load_state_dict(mine.state_dict())
    fused = AttentionLanguageModel(c).eval()
    fused.load_state_dict(mine.state_dict())
    idx = torch.randint(0, c.vocab_size, (3, c.context_length))
    targets = torch.randint(0, c.vocab_size, (3, c.context_length))
    with torch.no_grad():
        for theirs in (model, fused):
            for got, want in zip(mine(idx, targets), theirs(idx, targets), strict=True):
                torch.testing.assert_close(got, want)
    count = nb["count_parameters_by_hand"](c.vocab_size, c.context_length, c.embedding_size, c.head_size, c.num_blocks)
    assert count == num_parameters(model) == sum(p.numel() for p in mine.parameters())


def test_03_greedy_generation_by_hand_is_generate_at_temperature_zero(lang):
    nb = notebook(lang, "03")
    c = config_of(SIZES[0], vocab_size=60)
    torch.manual_seed(4)
    model = AttentionLanguageModel(c).eval()
    prompt = torch.tensor([[5, 17, 3]])
    steps = c.context_length - 3  # up to a full context; past it the project moves its window a quarter at a time
    with torch.no_grad():
        by_hand = nb["greedy_by_hand"](model, prompt, steps, c.context_length)
    for use_cache in (True, False):
        assert torch.equal(by_hand, model.generate(prompt, steps, temperature=0, use_cache=use_cache))


# -- 04: train and sample -------------------------------------------------------------------------------------------


def test_04_the_hand_written_step_is_train_steps_skeleton(lang, tmp_path, corpus):
    """With a constant rate and no accumulation, train_step moves the weights exactly as the notebook's four lines
    do with the same optimizer."""
    from tests.helpers import train_job
    from training.optim.factory import make_optimizer
    from training.session import setup
    from training.step import train_step

    nb = notebook(lang, "04")
    job = train_job(
        tmp_path,
        f"data.path={corpus}",
        "train.max_steps=3",
        "train.warmup_steps=0",
        "train.lr_schedule=constant",
        "train.dtype=float32",
        "model.context_length=16",
        "train.sample_prompts=['봄이']",
    )  # a prompt the test corpus holds
    s, state = setup(job, tmp_path / "run")
    mine = copy.deepcopy(s.raw_model)
    t = job.train
    optimizer = make_optimizer(mine, t.lr, t.weight_decay, (t.beta1, t.beta2), torch.device("cpu"), t)
    for _ in range(2):
        saved = s.sampler.state_dict()
        x, y = s.sampler.next_batch()
        s.sampler.load_state_dict(saved)  # train_step draws this same batch
        loss = nb["train_step_by_hand"](mine, optimizer, x, y, t.grad_clip)
        assert math.isclose(loss, train_step(s, state).loss, rel_tol=1e-6)
    for (name, got), want in zip(mine.state_dict().items(), s.raw_model.state_dict().values(), strict=True):
        torch.testing.assert_close(got, want, msg=name)


# -- 05: beyond the lecture -----------------------------------------------------------------------------------------


def test_05_rope_and_rms_norm_by_hand_are_the_packages(lang):
    from model.rope import apply_rope, rope_tables

    nb = notebook(lang, "05")
    torch.manual_seed(5)
    for dim in (2, 8, 32):
        cos, sin = rope_tables(dim, 100)
        x = torch.randn(4, dim)
        for position in (0, 1, 17, 99):
            torch.testing.assert_close(
                nb["rope_by_hand"](x, position), apply_rope(x, cos, sin, torch.full((4,), position))
            )
    norm = nn.RMSNorm(24)
    nn.init.normal_(norm.weight)
    x = torch.randn(3, 5, 24)
    with torch.no_grad():
        torch.testing.assert_close(nb["rms_norm_by_hand"](x, norm.weight), norm(x))


def test_05_jamo_arithmetic_and_the_jamo_embedding_by_hand_are_the_packages(lang):
    from model.hangul.jamo_embedding import NUM_FINALS, NUM_INITIALS, NUM_MEDIALS, JamoEmbedding, syllable_parts

    nb = notebook(lang, "05")
    tokenizer = build_tokenizer("hangul", [KOREAN])
    parts = syllable_parts(tokenizer.vocab_size)  # the rows each id's initial, medial and final read
    torch.manual_seed(6)
    embedding = JamoEmbedding(tokenizer.vocab_size, 8)
    for token_id in range(1, 11173):
        i, m, f = nb["jamo_indices"](chr(0xAC00 + token_id - 1))
        assert parts[token_id].tolist() == [i, NUM_INITIALS + m, NUM_INITIALS + NUM_MEDIALS + f], token_id
        assert 0 <= m < NUM_MEDIALS and 0 <= f < NUM_FINALS
    with torch.no_grad():
        for token_id in (1, 2, 4000, 11172, int(tokenizer.encode("뷁")[0])):
            torch.testing.assert_close(
                nb["jamo_vector_by_hand"](embedding, token_id), embedding(torch.tensor(token_id))
            )


def test_05_the_stages_by_hand_are_the_playgrounds(lang):
    from playground.stages import syllable_stages

    nb = notebook(lang, "05")
    torch.manual_seed(7)
    probs = torch.softmax(torch.randn(11172 + 40) * 3, dim=-1)
    for token_id in (1, 589, 5000, 11172):
        by_hand = nb["stages_by_hand"](probs, token_id)
        expected = [stage["p"] for stage in syllable_stages(probs, token_id)]
        assert by_hand == pytest.approx(expected, rel=1e-9)
        assert math.prod(by_hand) == pytest.approx(probs[token_id].item(), rel=1e-5)
