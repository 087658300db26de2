"""The modern recipe: the Muon/AdamW split, Muon itself, recipes as configs, the ladder, checkpoints."""

import math

import pytest
import torch

from tests.helpers import compose_config, config_object, tiny_model, train_job

MODERN = dict(position="rope", norm="rmsnorm", mlp="relu2", qk_norm=True, zero_init_proj=True, init="torch")
LADDER = ["lecture", "l1_torch_init", "l2_rope", "l3_rmsnorm", "l4_relu2", "l5_qk_norm", "l6_zero_init", "modern"]


def _muon_optimizer(model, **train):
    from training.optim.factory import make_optimizer
    from training.settings.config import TrainConfig

    return make_optimizer(model, 2e-3, 0.1, (0.9, 0.99), torch.device("cpu"), TrainConfig(optimizer="muon", **train))


@pytest.mark.parametrize("tie", [False, True])
def test_muon_adamw_split_covers_every_parameter_once_and_keeps_the_rest_out_of_muon(tie):
    m = tiny_model(tie_weights=tie, **MODERN)
    opt = _muon_optimizer(m)
    seen = [id(p) for g in opt.param_groups for p in g["params"]]
    assert sorted(seen) == sorted(id(p) for p in m.parameters()) and len(seen) == len(set(seen))
    muon = {id(p) for g in opt.param_groups if g["use_muon"] for p in g["params"]}
    names = {id(p): n for n, p in m.named_parameters()}
    assert muon and all(names[i].startswith("blocks.") and m.get_parameter(names[i]).dim() >= 2 for i in muon)
    for n, p in m.named_parameters():
        if p.dim() < 2 or "embedding" in n or n.startswith("lm_head") or "ln" in n or n.endswith("bias"):
            assert id(p) not in muon, n
    blocks_matrices = {id(p) for n, p in m.named_parameters() if n.startswith("blocks.") and p.dim() >= 2}
    assert muon == blocks_matrices  # the fused qkv (3, H, head_dim, E) among them: a stack of matrices


def test_adamw_split_is_the_lecture_grouping():
    from training.optim.factory import param_groups

    m = tiny_model()
    decay, no_decay = param_groups(m, 0.1)
    assert {id(p) for p in decay["params"]} == {
        id(p) for n, p in m.named_parameters() if p.dim() >= 2 and "embedding" not in n
    }
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(m.parameters()))


def test_muon_step_is_torch_muon_step():
    from training.optim.muon import MuonAdamW

    torch.manual_seed(0)
    w = torch.randn(24, 40)
    grads = [torch.randn(24, 40) for _ in range(3)]
    ours, ref = torch.nn.Parameter(w.clone()), torch.nn.Parameter(w.clone())
    a = MuonAdamW([{"params": [ours], "use_muon": True, "lr": 0.05, "weight_decay": 0.1}], ns_dtype=torch.bfloat16)
    b = torch.optim.Muon([ref], lr=0.05, weight_decay=0.1, momentum=0.95, nesterov=True)
    for g in grads:
        ours.grad, ref.grad = g.clone(), g.clone()
        a.step()
        b.step()
    assert torch.allclose(ours, ref, atol=2e-3)
    assert not torch.allclose(ours, w, atol=1e-2)


def test_orthogonalize_gives_singular_values_near_one():
    from training.optim.muon import orthogonalize

    g = torch.randn(3, 32, 96)
    for x in (orthogonalize(g), orthogonalize(g.mT)):
        s = torch.linalg.svdvals(x.float())
        assert s.min() > 0.5 and s.max() < 1.3


def test_set_lr_keeps_each_groups_multiple_of_the_schedule():
    from training.optim.factory import set_lr

    opt = _muon_optimizer(tiny_model(**MODERN), muon_lr=0.04, embedding_lr=0.01)
    set_lr(opt, 1e-3)  # half of train.lr=2e-3: every group at half its peak
    rates = sorted(g["lr"] for g in opt.param_groups)
    assert rates == pytest.approx([1e-3, 1e-3, 5e-3, 0.02])


def test_tiny_modern_model_overfits_a_tiny_batch():
    from training.optim.factory import set_lr

    m = tiny_model(**MODERN).train()
    opt = _muon_optimizer(m)
    set_lr(opt, 3e-3)
    torch.manual_seed(0)
    x, y = torch.randint(0, 50, (2, 16)), torch.randint(0, 50, (2, 16))
    first = None
    for _ in range(150):
        _, loss = m(x, y)
        first = first or loss.item()
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert first > 3.5 and loss.item() < 0.2


def test_default_config_is_the_lecture_recipe_and_recipes_stay_orthogonal_to_sizes():
    from model.config import ModelConfig

    job = config_object("train")
    lecture = ModelConfig()
    assert job.recipe == "lecture" and job.train.optimizer == "adamw"
    assert (
        job.model.position,
        job.model.norm,
        job.model.mlp,
        job.model.qk_norm,
        job.model.zero_init_proj,
        job.model.init,
    ) == (lecture.position, lecture.norm, lecture.mlp, lecture.qk_norm, lecture.zero_init_proj, lecture.init)
    modern = config_object("train", "recipe=modern", "model=base")
    base = config_object("train", "model=base")
    assert modern.recipe == "modern" and modern.train.optimizer == "muon"
    assert (modern.model.embedding_size, modern.model.num_blocks) == (base.model.embedding_size, base.model.num_blocks)
    assert all(getattr(modern.model, k) == v for k, v in MODERN.items())


def test_each_ladder_rung_adds_one_change():
    from omegaconf import OmegaConf

    from tests.helpers import ROOT

    sweep = OmegaConf.load(ROOT / "configs" / "experiment" / "ladder.yaml").hydra.sweeper.params["recipe"]
    assert sweep.split(",") == LADDER
    assert compose_config("train", "experiment=ladder").train.max_seconds == 300
    jobs = [config_object("train", f"recipe={r}") for r in LADDER]
    for prev, job in zip(jobs[:-2], jobs[1:-1], strict=True):
        changed = [
            k for k in ("model", "train") for f, v in vars(getattr(job, k)).items() if getattr(getattr(prev, k), f) != v
        ]
        assert len(changed) == 1, (job.recipe, changed)
    assert jobs[-1].model == jobs[-2].model  # the last step tunes the training settings only


@pytest.mark.slow
def test_checkpoints_remember_their_recipe_resume_with_muon_and_old_ones_load_as_lecture(tmp_path):
    from inference.checkpoint import load_checkpoint
    from inference.loading import load_run
    from training.trainer import train

    run = tmp_path / "modern"
    job = train_job(tmp_path, "recipe=modern", "train.max_steps=6", "train.eval_interval=3", "train.warmup_steps=2")
    result = train(job, run)
    assert math.isfinite(result.val_loss)
    ckpt = load_checkpoint(run / "ckpt.pt")
    assert ckpt.config["recipe"] == "modern" and ckpt.model_config.position == "rope"
    resumed = train(train_job(tmp_path, "recipe=modern", "train.max_steps=9", f"train.resume={run}"), run)
    assert resumed.step == 9
    # a checkpoint written before the switches existed: no new model keys, no recipe in its config
    payload = torch.load(run / "ckpt.pt", weights_only=True)
    old = tmp_path / "old" / "ckpt.pt"
    old.parent.mkdir()
    lecture = tiny_model(
        vocab_size=ckpt.model_config.vocab_size, context_length=32, embedding_size=64, head_size=64, num_blocks=2
    )
    keys = (
        "vocab_size",
        "context_length",
        "embedding_size",
        "head_size",
        "num_heads",
        "num_blocks",
        "dropout",
        "attention",
        "tie_weights",
    )
    payload["model_config"] = {k: getattr(lecture.config, k) for k in keys}
    payload["model"] = lecture.state_dict()
    payload["config"] = {k: v for k, v in payload["config"].items() if k != "recipe"}
    payload["training"] = None
    torch.save(payload, old)
    loaded = load_run(str(old), torch.device("cpu"))
    assert loaded.model.config.position == "learned" and loaded.model.position_embedding is not None
    assert loaded.checkpoint.config.get("recipe", "lecture") == "lecture"


def test_embedding_lr_gives_adamw_embeddings_their_own_rate():
    import torch

    from training.optim.factory import make_optimizer, set_lr
    from training.settings.config import TrainConfig

    model = tiny_model()
    plain = make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), torch.device("cpu"), TrainConfig(lr=1e-3))
    assert len(plain.param_groups) == 2  # unchanged when not asked for
    opt = make_optimizer(model, 1e-3, 0.1, (0.9, 0.99), torch.device("cpu"), TrainConfig(lr=1e-3, embedding_lr=5e-3))
    set_lr(opt, 5e-4)  # the schedule moves every group together
    emb = next(g for g in opt.param_groups if any(p is model.token_embedding.weight for p in g["params"]))
    assert emb["lr"] == pytest.approx(2.5e-3) and emb["weight_decay"] == 0.0
    assert sum(len(g["params"]) for g in opt.param_groups) == len(list(model.parameters()))


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_embedding_weight_decay_shrinks_the_embeddings_and_nothing_else(optimizer):
    from training.optim.factory import make_optimizer
    from training.settings.config import TrainConfig

    def one_step_without_gradient(decay: float) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        model = tiny_model(**MODERN)
        train = TrainConfig(optimizer=optimizer, lr=1e-2, embedding_weight_decay=decay)
        opt = make_optimizer(model, 1e-2, 0.0, (0.9, 0.99), torch.device("cpu"), train)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)  # Adam's step is then zero: only a decay moves a weight
        watched = {"embedding": model.token_embedding.weight, "head": model.lm_head.weight}
        before = {k: w.detach().clone() for k, w in watched.items()}
        opt.step()
        return {k: (before[k], w.detach()) for k, w in watched.items()}

    default = one_step_without_gradient(0.0)
    assert torch.equal(*default["embedding"])  # embeddings never decay unless asked
    decayed = one_step_without_gradient(0.5)
    before, after = decayed["embedding"]
    assert torch.allclose(after, before * (1 - 1e-2 * 0.5))
    assert torch.equal(*decayed["head"])  # train.weight_decay=0: the head keeps its weights
