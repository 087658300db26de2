"""benchmarks/ladder.py (campaign and report), runs.py's held-out split and nanogpt_peer.py: held-out tails at
document boundaries, resumable campaigns, the table, and the nanoGPT harness (on a stand-in for nanoGPT's model.py)."""

from __future__ import annotations

import json

import pytest

from benchmarks.ladder import markdown, summarise
from benchmarks.runs import split_heldout, tail_boundary
from tests.helpers import KOREAN, cli

FAKE_NANOGPT = """
import torch
from dataclasses import dataclass
from torch import nn
import torch.nn.functional as F

@dataclass
class GPTConfig:
    block_size: int = 8
    vocab_size: int = 10
    n_layer: int = 1
    n_head: int = 1
    n_embd: int = 8
    dropout: float = 0.0
    bias: bool = True

class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size)

    def forward(self, idx, targets=None):
        logits = self.head(self.emb(idx))
        if targets is None:
            return logits[:, [-1]], None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        return torch.optim.AdamW(self.parameters(), lr=learning_rate, betas=betas, weight_decay=weight_decay)
"""


def test_tail_is_cut_at_a_blank_line_when_there_are_documents():
    lines = ["가나다\n"] * 50 + ["\n"] + ["라마바\n"] * 40 + ["\n"] + ["사아자\n"] * 10
    cut = tail_boundary(lines, 0.1)
    assert lines[cut - 1] == "\n" and lines[cut] == "사아자\n"  # the last document, whole
    assert tail_boundary(["한 줄\n"] * 100, 0.05) == 95  # no blank lines: cut at a line


def test_split_is_written_once_and_reused(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(KOREAN * 20, encoding="utf-8")
    train, heldout = split_heldout(corpus, tmp_path / "splits", 0.1)
    assert train.read_text(encoding="utf-8") + heldout.read_text(encoding="utf-8") == (KOREAN * 20)
    before = train.stat().st_mtime_ns
    assert split_heldout(corpus, tmp_path / "splits", 0.1) == (train, heldout)
    assert train.stat().st_mtime_ns == before


def test_table_has_mean_spread_and_gap():
    results = [
        {"corpus": "c", "rung": "nanogpt", "seed": 1, "heldout_bpc": 5.0, "steps": 10, "tokens": 80},
        {"corpus": "c", "rung": "nanogpt", "seed": 2, "heldout_bpc": 5.2, "steps": 10, "tokens": 80},
        {"corpus": "c", "rung": "modern", "seed": 1, "heldout_bpc": 4.5, "steps": 5, "tokens_per_sec": 9.0},
        {"corpus": "c", "rung": "modern", "seed": 2, "heldout_bpc": 4.7, "steps": 7, "tokens_per_sec": 11.0},
        {"corpus": "c", "rung": "broken", "seed": 1, "error": "boom"},
    ]
    rows = {row["rung"]: row for row in summarise(results)["c"]}
    assert set(rows) == {"nanogpt", "modern"}
    assert rows["modern"]["bpc"] == pytest.approx(4.6) and rows["modern"]["spread"] == pytest.approx(0.1)
    assert rows["modern"]["gap"] == pytest.approx(-0.5) and rows["modern"]["steps"] == 6
    text = markdown(summarise(results), "300 s")
    assert "| modern | 4.600 ± 0.100 | -0.500 |" in text and "300 s per run" in text


def test_a_lever_is_compared_with_its_recipe_on_the_same_seeds_only():
    from benchmarks.ladder import levers_markdown, paired

    def run(rung, seed, bpc, steps=10):
        return {"corpus": "c", "rung": rung, "seed": seed, "heldout_bpc": bpc, "steps": steps}

    results = [
        run("modern", 1, 4.5),
        run("modern", 2, 4.7),
        run("modern+x", 1, 4.4, 5),
        run("modern+x", 2, 4.65),
        run("modern+x", 3, 1.0),
        run("lecture+y", 1, 5.0),
        {"corpus": "c", "rung": "modern+z", "error": "boom"},
    ]
    rows = {row["rung"]: row for row in paired(results)["c"]}
    assert set(rows) == {"modern+x"}  # lecture+y has no recipe run to pair with; seed 3 of modern+x neither
    x = rows["modern+x"]
    assert x["seeds"] == [1, 2] and x["diffs"] == pytest.approx([-0.1, -0.05]) and x["diff"] == pytest.approx(-0.075)
    assert x["base_spread"] == pytest.approx(0.1) and x["step_ratio"] == pytest.approx(0.75)
    assert "| modern+x | -0.075 | -0.100, -0.050 | 0.100 | 0.75x | 2 |" in levers_markdown(paired(results), "300 s")


@pytest.mark.slow
def test_ladder_runs_rungs_and_the_peer_then_resumes(tmp_path):
    nanogpt = tmp_path / "nanoGPT"
    nanogpt.mkdir()
    (nanogpt / "model.py").write_text(FAKE_NANOGPT, encoding="utf-8")
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join([KOREAN] * 12), encoding="utf-8")
    args = (
        "-m",
        "benchmarks.ladder",
        "--corpus",
        f"tiny={corpus}",
        "--steps",
        "3",
        "--seeds",
        "1",
        "--rungs",
        "lecture,modern",
        "--nanogpt",
        str(nanogpt),
        "--out",
        str(tmp_path / "out"),
        "--variant",
        "modern+avg=modern:train.average=ema model.attention_gate=true",
        "--set",
        "model=tiny train.eval_steps=1 train.sample_chars=0 train.sample_tokens=0 train.attention_tokens=0",
    )
    r = cli(*args, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [x["rung"] for x in records] == ["nanogpt", "lecture", "modern", "modern+avg"]
    from inference.checkpoint import load_checkpoint

    variant = load_checkpoint(next((tmp_path / "out" / "tiny").glob("modern+avg-seed1337*")) / "ckpt.pt")
    assert variant.averaged is not None and variant.model_config.attention_gate  # the variant's overrides applied
    assert all("error" not in x and x["heldout_bpc"] > 0 and x["steps"] == 3 for x in records)
    assert all(x["heldout"] == 0.05 and x["corpus_sha256"] and x["budget"] == "3 steps" for x in records)
    assert [x.get("weights") for x in records] == [None, "raw", "raw", "averaged"]  # what evaluate.py scored
    assert records[1]["tokens"] == 3 * 8 * 32 and records[2]["tokens"] == 3 * 16 * 32 and records[1]["params"] > 0
    assert "| modern |" in (tmp_path / "out" / "ladder.md").read_text()
    assert "| modern+avg |" in (tmp_path / "out" / "ladder.md").read_text()
    again = cli(*args, timeout=600)  # nothing left to run: the results are reused
    assert again.returncode == 0 and not [x for x in again.stdout.splitlines() if x.startswith("{")]


def test_bad_arguments_are_one_line(tmp_path):
    r = cli("-m", "benchmarks.ladder", "--corpus", "x=/no/such/file")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--corpus" in r.stderr
    r = cli("-m", "benchmarks.ladder", "--corpus", f"x={__file__}", "--rungs", "lecture,nope")
    assert r.returncode == 2 and "nope" in r.stderr
    r = cli("-m", "benchmarks.ladder", "--corpus", f"x={__file__}", "--variant", "v=nope:train.lr=1")
    assert r.returncode == 2 and "--variant" in r.stderr and r.stderr.count("\n") == 1


def test_peer_settings_are_checked():
    from benchmarks.nanogpt_peer import settings
    from common.errors import UserError

    assert settings(["dropout=0.1", "bias=true"])["dropout"] == 0.1
    with pytest.raises(UserError, match="unknown setting"):
        settings(["wat=1"])


def test_a_probe_keeps_its_own_folder():
    from benchmarks.ladder import run_name

    plain, probe = run_name("modern", 1337, ""), run_name("modern", 1337, "model.dropout=0.2")
    assert plain == "modern-seed1337" and probe.startswith("modern-seed1337-set")
    assert probe != run_name("modern", 1337, "model.dropout=0")
    assert probe == run_name("modern", 1337, "model.dropout=0.2")


def test_the_idle_check_measures_other_programs():
    from benchmarks.ladder import machine_line
    from benchmarks.runs import cpu_busy, machine_before_run

    busy = cpu_busy(0.2)
    assert busy is None or 0.0 <= busy <= 1.0
    state = machine_before_run()
    assert set(state) == {"load_before", "cpu_busy_before", "reference_gflops"} and state["reference_gflops"] > 0
    said = machine_line([{"max_load": 1.9, "max_busy": 0.03}, {"max_load": 2.0, "max_busy": None}])
    assert "at most 3.0% of the CPUs" in said and "at most 2.00" in said
    assert machine_line([{"max_load": 0.2, "max_busy": None}]).startswith("The 1-minute load average")


def test_a_machine_that_changed_speed_is_called_out():
    from benchmarks.ladder import machine_line

    steady = machine_line([{"max_load": 1.0, "max_busy": 0.0, "reference": [200.0, 210.0]}])
    assert "200 to 210 GFLOP/s" in steady and "with care" not in steady
    slowed = machine_line(
        [
            {"max_load": 1.0, "max_busy": 0.0, "reference": [250.0]},
            {"max_load": 1.0, "max_busy": 0.0, "reference": [160.0, 170.0]},
        ]
    )
    assert "changed by 56%" in slowed and "with care" in slowed
    assert "GFLOP/s" not in machine_line([{"max_load": 1.0, "max_busy": None}])  # results from before the check
