"""A corpus saved by Windows, macOS or Linux tools trains to the same vocabulary and ids.

CP949, UTF-8 with BOM, UTF-16 with BOM (both byte orders), CRLF / CR line ends and NFD (macOS file names
and some editors) are read, normalised to NFC with "\\n" line ends, and tokenised identically; the
end-to-end test checks `vocab.json` and the first evaluation of tiny runs on four such files.
"""

from __future__ import annotations

import codecs
import unicodedata

import numpy as np
import pytest

from data.corpus import load_corpus
from data.text import read_text
from tests.helpers import KOREAN, TINY, cli_all

TEXT = KOREAN * 2  # about 600 characters: enough for model.context_length=16 with the default split


def _nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def _crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


VARIANTS = {
    "utf8": lambda t: t.encode("utf-8"),
    "utf8_bom": lambda t: codecs.BOM_UTF8 + t.encode("utf-8"),
    "utf16_le_bom": lambda t: codecs.BOM_UTF16_LE + t.encode("utf-16-le"),
    "utf16_be_bom": lambda t: codecs.BOM_UTF16_BE + t.encode("utf-16-be"),
    "cp949": lambda t: t.encode("cp949"),
    "crlf": lambda t: _crlf(t).encode("utf-8"),
    "cr": lambda t: t.replace("\n", "\r").encode("utf-8"),
    "nfd": lambda t: _nfd(t).encode("utf-8"),
    "cp949_crlf": lambda t: _crlf(t).encode("cp949"),
    "utf8_bom_nfd_crlf": lambda t: codecs.BOM_UTF8 + _crlf(_nfd(t)).encode("utf-8"),
    "utf16_nfd": lambda t: _nfd(t).encode("utf-16"),
}


def _write_variants(d, names) -> dict:
    paths = {}
    for name in names:
        paths[name] = d / f"{name}.txt"
        paths[name].write_bytes(VARIANTS[name](TEXT))
    return paths


def test_variants_really_differ_on_disk(tmp_path):
    paths = _write_variants(tmp_path, VARIANTS)
    assert len({p.read_bytes() for p in paths.values()}) == len(VARIANTS)
    assert len(_nfd(TEXT)) > len(TEXT) * 2  # NFD splits every syllable into two or three jamo


@pytest.mark.parametrize("tokenizer_kind", ["char", "jamo"])
def test_every_variant_gives_the_same_vocabulary_and_ids(tmp_path, tokenizer_kind):
    paths = _write_variants(tmp_path, VARIANTS)
    base = load_corpus(paths["utf8"], cache_dir=tmp_path / "cache_utf8", tokenizer_kind=tokenizer_kind)
    assert base.num_unknown == 0 and len(base.tokens) >= len(TEXT)
    for name, path in paths.items():
        assert read_text(path) == TEXT, name
        c = load_corpus(path, cache_dir=tmp_path / f"cache_{name}", tokenizer_kind=tokenizer_kind)
        assert c.tokenizer.to_dict() == base.tokenizer.to_dict(), name
        assert np.array_equal(np.asarray(c.tokens), np.asarray(base.tokens)), name
        assert c.num_chars == base.num_chars, name


@pytest.mark.slow
def test_tiny_runs_on_every_encoding_learn_the_same_thing(tmp_path):
    names = ["utf8", "cp949_crlf", "utf8_bom_nfd_crlf", "utf16_nfd"]
    paths = _write_variants(tmp_path, names)
    runs = {name: tmp_path / f"run_{name}" for name in names}
    results = cli_all(
        *(
            (
                "train.py",
                *TINY,
                "model.context_length=16",
                "train.max_steps=2",
                "train.eval_interval=2",
                "train.dtype=float32",  # auto on a bf16 CPU would time each run under the others' load
                f"data.path={paths[n]}",
                f"hydra.run.dir={runs[n]}",
            )
            for n in names
        )
    )
    for name, r in zip(names, results, strict=True):
        assert r.returncode == 0, f"{name}: {r.stderr}"
    vocab = {name: (runs[name] / "vocab.json").read_bytes() for name in names}
    assert all(v == vocab["utf8"] for v in vocab.values())
    evals = [[line for line in r.stdout.splitlines() if line.startswith("step 2:")] for r in results]
    assert evals[0] and all(e == evals[0] for e in evals)  # same ids, same seed: the same losses
