"""Comparing runs in TensorBoard: experiment presets, attention maps, hparams, and a sweep read back by a real
TensorBoard server through its HTTP data API."""

import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from cli.hydra_setup import _job_name, _safe_name
from model import AttentionLanguageModel
from model.attention_maps import attention_maps
from model.counts import num_parameters, parameter_counts
from tests.helpers import ROOT, cli, compose_config, tiny_model
from training.reporting.tensorboard import attention_image, flatten_hparams, parameter_table

CONFIGS = ROOT / "configs"
EXPERIMENTS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))
# The scalar tags every run writes (the README and docs/en/sweeps.md name them), and the final metrics beside each
# run's hyperparameters in the HParams tab.
TAGS = (
    "train/loss",
    "train/lr",
    "train/grad_norm",
    "train/tokens_per_sec",
    "train/eval_loss",
    "val/loss",
    "val/bpc",
    "val/best_loss",
)
HPARAM_METRICS = ("hparam/val_loss", "hparam/val_bpc", "hparam/best_val_loss", "hparam/tokens_per_sec", "hparam/params")


# -- experiment presets ---------------------------------------------------------------------------------


def test_the_four_presets_exist():
    assert {"heads", "context", "width", "depth"} <= set(EXPERIMENTS)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_and_every_swept_value_is_valid(experiment):
    from hydra import compose

    cfg = compose_config("train", f"experiment={experiment}")  # registers the schemas; composes without hydra.*
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={experiment}"], return_hydra_config=True)
    params = OmegaConf.to_container(cfg.hydra.sweeper.params)
    assert params, f"{experiment}.yaml sweeps nothing (hydra.sweeper.params is empty)"
    assert cfg.hydra.runtime.choices.experiment == experiment
    for key, values in params.items():
        assert OmegaConf.select(cfg, key) is not None, f"{experiment} sweeps {key}, which is not a config key"
        for value in str(values).split(","):
            swept = OmegaConf.to_object(compose_config("train", f"experiment={experiment}", f"{key}={value.strip()}"))
            model_cfg = swept.model.with_vocab(50)
            AttentionLanguageModel(replace(model_cfg, dropout=0.0) if model_cfg.dropout is None else model_cfg)


def test_sweep_job_names_drop_the_experiment_the_sweep_folder_names():
    assert _job_name(["experiment=heads", "model.num_heads=2"], "heads") == "model.num_heads-2"
    assert _job_name(["+experiment=heads", "model.num_heads=2"], "heads") == "model.num_heads-2"  # the old form
    assert _job_name(["model.num_heads=2", "train.lr=0.01"], "") == "model.num_heads-2+train.lr-0.01"
    assert _job_name(["experiment=heads"], "heads") == "run"
    assert _job_name(["experiment=headsx", "model.num_heads=2"], "heads") == "experiment-headsx+model.num_heads-2"
    assert _job_name(["device=cpu", "model.num_heads=2"], "", ["device"]) == "model.num_heads-2"


def test_run_and_job_names_paste_back_and_stay_apart():
    """Names hold only letters, digits and `_ . + -`; a shortened path or a replaced character adds a hash."""
    a = _safe_name(["data.path=/home/u/a/novels.txt", "model=tiny"])
    b = _safe_name(["data.path=/home/u/b/novels.txt", "model=tiny"])
    assert a.startswith("data.path-novels.txt+model-tiny+") and a != b
    assert re.fullmatch(r"[\w.+-]+", a) and re.fullmatch(r"[\w.+-]+", _safe_name(["prompt='안녕 (1), [2]'"]))
    assert _safe_name([]) == "" and _safe_name(["model=tiny"]) == "model-tiny"


# -- attention maps, parameter table, hparams -----------------------------------------------------------


def test_attention_maps_are_causal_distributions():
    model = tiny_model("heads", vocab_size=40, num_blocks=3)
    maps = attention_maps(model, torch.randint(0, 40, (12,)))
    assert maps.shape == (3, 4, 12, 12)
    assert torch.allclose(maps.sum(-1), torch.ones(3, 4, 12))
    assert (maps.triu(diagonal=1) == 0).all()
    assert model.training is False


def test_attention_maps_are_the_weights_the_heads_use():
    model = tiny_model("heads", vocab_size=40, num_blocks=3)
    idx = torch.randint(0, 40, (1, 10))
    maps = attention_maps(model, idx)
    x = model.token_embedding(idx) + model.position_embedding(torch.arange(10))
    for b, block in enumerate(model.blocks):
        h = block.ln1(x)
        for i, head in enumerate(block.attn.heads):
            assert torch.allclose(maps[b, i] @ head.value(h)[0], head(h)[0], atol=1e-5)
        x = block(x)


def test_attention_maps_reject_more_than_the_context():
    with pytest.raises(ValueError, match=r"1\.\.16 ids"):
        attention_maps(tiny_model("heads", vocab_size=40, num_blocks=3), torch.zeros(17, dtype=torch.long))


def test_parameter_table_adds_up():
    model = tiny_model("heads", vocab_size=40, num_blocks=3, tie_weights=True)
    counts = dict(parameter_counts(model))
    assert sum(counts.values()) == num_parameters(model)
    assert "lm_head" not in counts  # tied to the token embedding, counted once
    assert {"token_embedding", "blocks.0.attn", "blocks.2.ffwd", "ln_f"} <= set(counts)
    table = parameter_table(model)
    assert table.startswith("| module |") and f"**{num_parameters(model):,}**" in table


def test_attention_image_puts_heads_side_by_side():
    maps = attention_maps(tiny_model("heads", vocab_size=40, num_blocks=3), torch.arange(8)).numpy()[0]  # (4, 8, 8)
    img = attention_image(maps, cell=3, gap=2)
    assert img.dtype == np.uint8 and img.shape == (8 * 3, 4 * 8 * 3 + 3 * 2, 3)
    assert (img[0, 3] == 235).all()  # above the diagonal: the future, light grey
    assert not (img[-1, 0] == 235).all()


def test_hparams_are_flat_scalars():
    flat = flatten_hparams(
        {
            "model": {"num_heads": 4, "tie_weights": False},
            "train": {"resume": None, "lr": 1e-3},
            "data": OmegaConf.create({"path": None, "prompts": ["옛날에"]}),
            "seed": 1,
        }
    )
    assert flat == {
        "model.num_heads": 4,
        "model.tie_weights": "false",
        "train.resume": "null",
        "train.lr": 1e-3,
        "data.path": "null",
        "data.prompts": '["옛날에"]',
        "seed": 1,
    }


# -- a real sweep, read back by a real TensorBoard server ----------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TensorBoard:
    def __init__(self, logdir: Path):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tensorboard.main",
                "--logdir",
                str(logdir),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--reload_interval",
                "1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def get(self, path: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read().decode())

    def wait_for(self, path: str, ready, body: dict | None = None, timeout: float = 90):
        """Poll until ready(answer) holds: the server loads event files in the background."""
        deadline, answer = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tensorboard exited: {self.proc.stderr.read()[-2000:]}")
            try:
                answer = self.get(path, body)
                if ready(answer):
                    return answer
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.5)
        raise AssertionError(f"{path} never became ready; last answer: {answer}")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def tensorboard():
    servers = []

    def start(logdir: Path) -> TensorBoard:
        servers.append(TensorBoard(logdir))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.mark.slow
def test_a_sweep_compares_in_tensorboard(tmp_path, tensorboard):
    sweep = tmp_path / "sweep"
    r = cli(
        "train.py",
        "-m",
        "model=tiny",
        "model.num_heads=1,2",
        "train.max_steps=12",
        "train.eval_interval=6",
        "train.eval_steps=2",
        "train.log_interval=3",
        "train.batch_size=8",
        "train.sample_tokens=10",
        "train.sample_chars=0",
        f"hydra.sweep.dir={sweep}",
    )
    assert r.returncode == 0, r.stderr
    runs = sorted(p.parent.name for p in sweep.glob("*/events.out.tfevents.*"))
    assert len(runs) == 2 and runs[0].startswith("model.num_heads-1+") and runs[1].startswith("model.num_heads-2+")

    tb = tensorboard(sweep)
    assert sorted(tb.wait_for("/data/runs", lambda a: len(a) == 2)) == runs

    scalars = tb.wait_for("/data/plugin/scalars/tags", lambda a: len(a) == 2)
    for run in runs:
        assert set(TAGS) | set(HPARAM_METRICS) <= set(scalars[run]), run

    experiment = tb.get("/data/plugin/hparams/experiment", {"experimentName": ""})
    infos = {h["name"]: h for h in experiment["hparamInfos"]}
    assert infos["model.num_heads"]["differs"] and not infos["model.embedding_size"].get("differs", False)
    assert {"train.lr", "data.val_fraction", "seed"} <= set(infos)
    assert set(HPARAM_METRICS) <= {m["name"]["tag"] for m in experiment["metricInfos"]}

    groups = tb.get(
        "/data/plugin/hparams/session_groups",
        {
            "experimentName": "",
            "startIndex": 0,
            "sliceSize": 100,
            "colParams": [],
            "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
        },
    )["sessionGroups"]
    by_run = {g["name"]: g for g in groups}
    assert sorted(by_run) == runs
    for heads, run in zip((1, 2), runs, strict=True):
        group = by_run[run]
        assert group["hparams"]["model.num_heads"] == heads and group["hparams"]["train.resume"] == "null"
        metrics = {m["name"]["tag"]: m for m in group["metricValues"]}
        assert set(HPARAM_METRICS) <= set(metrics)
        assert metrics["hparam/params"]["trainingStep"] == 12 and metrics["hparam/params"]["value"] > 1000
        assert 0 < metrics["hparam/best_val_loss"]["value"] <= metrics["hparam/val_loss"]["value"] + 1e-6

    text = tb.get("/data/plugin/text/tags")
    images = tb.get("/data/plugin/images/tags")
    for run in runs:
        assert {"samples/prompt_0", "samples/prompt_1", "model/parameters"} <= {
            t.split("/text_summary")[0] for t in text[run]
        }
        assert set(images[run]) == {"attention/block_0", "attention/block_1"}
        assert images[run]["attention/block_0"]["samples"] == 1
    from urllib.parse import quote

    samples = tb.get(f"/data/plugin/text/text?run={quote(runs[0])}&tag=samples/prompt_0/text_summary")
    assert [s["step"] for s in samples] == [6, 12] and "옛날에" in samples[0]["text"]
    shots = tb.get(f"/data/plugin/images/images?run={quote(runs[1])}&tag=attention/block_1")
    assert [s["step"] for s in shots] == [6, 12]
