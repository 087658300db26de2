"""Checkpoints and exported folders written by an earlier version load and compute what they computed then.

tests/fixtures/written_before.tar.gz holds tiny runs trained and exported at commit 971c7bc (before the model
class was split into the lecture's model and the Hangul-aware layers beside it): the lecture recipe, the modern
recipe, the modern recipe with SwiGLU (exported as a LLaMA), and the Hangul-aware model (jamo input, staged
head), each as its `ckpt.pt` (with the training state) and as the folder `export.py` wrote. Its
fingerprints.json is what tests/fixtures/fingerprint.py gave then: logits on a fixed text, greedy samples
(cached and not) and a seeded sample. Today's code must give the same.
"""

import json
import tarfile

import pytest

from tests.fixtures.fingerprint import fingerprint
from tests.helpers import ROOT, TINY, cli

ARCHIVE = ROOT / "tests" / "fixtures" / "written_before.tar.gz"
NAMES = ("lecture", "modern", "swiglu", "hangul")


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    root = tmp_path_factory.mktemp("written_before")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(root, filter="data")
    return root


@pytest.mark.parametrize("name", [*NAMES, *(f"export-{n}" for n in NAMES)])
def test_old_checkpoints_and_exports_compute_what_they_computed(unpacked, name):
    import torch

    then = json.loads((unpacked / "fingerprints.json").read_text(encoding="utf-8"))[name]
    now = fingerprint(str(unpacked / name))
    for key in ("ids", "top_ids", "probe_ids", "greedy", "greedy_uncached", "seeded"):
        assert now[key] == then[key], key
    for key in ("sum", "sumsq", "top_values", "probe_values"):
        torch.testing.assert_close(torch.tensor(now[key]), torch.tensor(then[key]), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lecture", "modern", "hangul"])
def test_old_checkpoints_resume(unpacked, tmp_path, name):
    """Training goes on from a checkpoint written before: the optimizer's state fits today's parameters."""
    corpus = tmp_path / "corpus.txt"  # the text the fixtures trained on: the built-in corpus's first 700 characters
    corpus.write_text((ROOT / "data" / "corpus" / "ko_default.txt").read_text(encoding="utf-8")[:700], encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    (run / "ckpt.pt").write_bytes((unpacked / name / "ckpt.pt").read_bytes())
    settings = [a for a in TINY if not a.startswith("model=")]  # the run's own model settings come back
    r = cli(
        "train.py",
        *settings,
        f"train.resume={run}",
        f"data.path={corpus}",
        "train.max_steps=8",
        f"data.cache_dir={tmp_path / 'cache'}",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "step 8" in r.stdout, r.stdout
