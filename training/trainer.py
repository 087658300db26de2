"""The training loop: AdamW, warmup + cosine schedule, accumulation, clipping, evaluation, checkpoints.

Runs the same way on one CPU, one GPU or many GPUs under torchrun (DDP). Only rank 0 logs, shows the
progress bar and writes checkpoints.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

from common.errors import UserError
from data.corpus import Corpus, load_corpus
from data.sampler import BatchSampler
from model import AttentionLanguageModel
from tokenizer import tokenizer_from_dict
from training import distributed
from training.checkpoint import (
    BEST_NAME,
    CKPT_NAME,
    load_checkpoint,
    resolve_checkpoint,
    save_checkpoint,
    strip_compile_prefix,
)
from training.config import check_train_config
from common.device import autocast, enable_fast_matmul, pick_device, resolve_dtype
from training.evaluation import bits_per_char, estimate_loss
from training.schedule import lr_at, make_optimizer
from training.state import capture_rng, restore_rng, seed_everything
from training.tb_logger import RunLogger


class TrainingDiverged(UserError):
    exit_code = 3


def fault_nan_step() -> int:
    """Fault injection for the crash-safety tests: KOCHAR_FAULT_NAN_AT_STEP=<n> makes the loss of step n NaN,
    to prove a diverged run stops and keeps its last good checkpoint. Unset (the normal case) = off."""
    value = os.environ.get("KOCHAR_FAULT_NAN_AT_STEP", "")
    return int(value) if value.isdigit() else 0


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    train_loss: float
    val_loss: float
    val_bpc: float
    best_val_loss: float
    tokens_per_sec: float
    seconds: float
    stopped: str  # "max_steps", "max_seconds", "SIGINT", "SIGTERM"
    sample: str = ""


class StopSignals:
    """SIGINT / SIGTERM ask the loop to stop after the current step; a second Ctrl-C aborts at once."""

    def __init__(self):
        self.received: str | None = None
        self._old = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass
        return self

    def _handle(self, signum, frame):
        if self.received and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


def min_corpus_tokens(context_length: int, val_fraction: float) -> int:
    """Fewest tokens for which both splits hold one (context_length + 1)-token window."""
    need = context_length + 1
    return max(math.ceil(need / val_fraction), math.ceil(need / (1 - val_fraction))) + 1


def epochs_to_steps(epochs: float, train_tokens: int, tokens_per_step: int) -> int:
    """Steps for `epochs` passes over the training split (the default when train.max_steps is null)."""
    return max(1, math.ceil(epochs * train_tokens / tokens_per_step))


def _load_data(cfg: DictConfig, tokenizer, resumed_from: Path | None) -> Corpus:
    corpus = load_corpus(cfg.data.path, tokenizer, cfg.data.get("cache_dir"), cfg.data.get("tokenizer", "char"))
    if resumed_from is not None and corpus.num_unknown:
        raise UserError(
            f"the corpus {corpus.path} has {corpus.num_unknown} characters outside the vocabulary of "
            f"{resumed_from}; resume with the data.path the run was trained on"
        )
    C, vf = cfg.model.context_length, cfg.data.val_fraction
    if len(corpus.tokens) < min_corpus_tokens(C, vf):
        # Sizes are in tokens; users think in characters (the same for `char`, fewer for `jamo`).
        per_char = len(corpus.tokens) / max(1, corpus.num_chars)
        raise UserError(
            f"the corpus {corpus.path} is too short: {corpus.num_chars} characters, but "
            f"model.context_length={C} with data.val_fraction={vf} needs at least "
            f"{math.ceil(min_corpus_tokens(C, vf) / per_char)} characters"
        )
    return corpus


def train(cfg: DictConfig, run_dir: str | Path) -> TrainResult:
    check_train_config(cfg)
    run_dir = Path(run_dir)
    t = cfg.train
    dist = distributed.init_distributed(cfg.device)
    device = pick_device(cfg.device, dist.local_rank)
    dtype = resolve_dtype(t.dtype, device)
    enable_fast_matmul(device)
    amp = lambda: autocast(device, dtype)  # noqa: E731

    payload, resumed_from = None, None
    if t.resume:
        resumed_from = resolve_checkpoint(t.resume)
        payload = load_checkpoint(resumed_from)
    elif dist.is_main and (run_dir / CKPT_NAME).exists() and not t.overwrite:
        raise UserError(
            f"{run_dir} already holds a checkpoint; pass train.resume={run_dir} to continue it, "
            "train.overwrite=true to start over, or another hydra.run.dir"
        )
    elif dist.is_main and t.overwrite:  # starting over: the old curves must not mix with the new ones
        for old_events in run_dir.glob("events.out.tfevents.*"):
            old_events.unlink()

    seed_everything(cfg.seed)
    tokenizer = tokenizer_from_dict(payload["tokenizer"]) if payload else None
    corpus = _load_data(cfg, tokenizer, resumed_from)
    tokenizer = corpus.tokenizer
    tokens_per_char = len(corpus.tokens) / max(1, corpus.num_chars)
    train_tokens, val_tokens = corpus.split(cfg.data.val_fraction)

    model_cfg = dict(OmegaConf.to_container(cfg.model, resolve=True))
    if payload:
        saved = payload["model_config"]
        for k in ("attention", "dropout"):  # may differ on resume: same parameters either way
            saved[k] = model_cfg.get(k, saved.get(k))
        model_cfg = saved
    model_cfg["vocab_size"] = tokenizer.vocab_size
    raw_model = AttentionLanguageModel(**model_cfg)
    if payload:
        raw_model.load_state_dict(payload["model"])
    raw_model.to(device)

    optimizer = make_optimizer(raw_model, t.lr, t.weight_decay, (t.beta1, t.beta2), device)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    sampler = BatchSampler(train_tokens, raw_model.context_length, t.batch_size, device, cfg.seed, dist.rank)
    step, best_val, elapsed_before = 0, float("inf"), 0.0
    if payload:
        optimizer.load_state_dict(payload["optimizer"])
        scaler.load_state_dict(payload.get("scaler", {}) or scaler.state_dict())
        step, best_val = int(payload["step"]), float(payload.get("best_val_loss", float("inf")))
        elapsed_before = float(payload.get("elapsed_seconds", 0.0))
        if dist.world_size == payload.get("world_size", 1):
            sampler.load_state_dict(payload["sampler"])
            restore_rng(payload["rng"])
    if dist.rank:
        torch.manual_seed(cfg.seed + dist.rank)  # different dropout masks per rank
    if dist.enabled:  # let users check that the ranks read different data
        state = sampler.state_dict()
        first = sampler.next_batch()[0]
        sampler.load_state_dict(state)
        digest = hashlib.sha1(first.cpu().numpy().tobytes()).hexdigest()[:12]
        print(f"rank {dist.rank}/{dist.world_size}: first batch {digest}", flush=True)

    model = raw_model
    if t.compile:
        model = torch.compile(model)
    if dist.enabled:
        model = DDP(model, device_ids=[dist.local_rank] if device.type == "cuda" else None)
    eval_model = model.module if dist.enabled else model

    logger = RunLogger(run_dir, enabled=dist.is_main, purge_step=step + 1 if payload else None)
    if dist.is_main:
        tokenizer.save(run_dir / "vocab.json")
    logger.watch(raw_model, tokenizer, list(t.get("sample_prompts") or []), t.get("sample_tokens", 0),
                 val_tokens[: min(t.get("attention_tokens", 0), raw_model.context_length)].tolist(), cfg.seed)
    accum = t.grad_accum_steps
    tokens_per_step = t.batch_size * raw_model.context_length * accum * dist.world_size
    max_steps = t.max_steps if t.max_steps is not None else epochs_to_steps(t.max_epochs, len(train_tokens),
                                                                          tokens_per_step)
    decay_steps = t.lr_decay_steps or max_steps
    ctx_len = raw_model.context_length

    def evaluate() -> tuple[float, float]:
        args = (ctx_len, t.batch_size, t.eval_steps, device, amp)
        return (estimate_loss(eval_model, train_tokens, *args, seed=cfg.seed + 1),
                estimate_loss(eval_model, val_tokens, *args, seed=cfg.seed + 2))

    def checkpoint(path: Path, val_loss: float) -> None:
        if not dist.is_main:
            return
        if not all(torch.isfinite(p).all() for p in raw_model.parameters()):
            raise TrainingDiverged("the model weights are not finite; the last good checkpoint was kept")
        save_checkpoint({
            "model": strip_compile_prefix(raw_model.state_dict()), "model_config": raw_model.config,
            "tokenizer": tokenizer.to_dict(), "step": step, "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict(), "best_val_loss": best_val, "val_loss": val_loss,
            "elapsed_seconds": elapsed_before + time.perf_counter() - t0, "rng": capture_rng(),
            "sampler": sampler.state_dict(), "world_size": dist.world_size, "tokens_per_char": tokens_per_char,
            "config": OmegaConf.to_container(cfg, resolve=True),
        }, path)

    raw_model.train()
    t0 = time.perf_counter()
    train_loss = val_loss = float("nan")
    last_log_time, last_log_step, tok_per_sec = t0, step, 0.0
    stopped = "max_steps"
    bar = tqdm(total=max_steps, initial=step, disable=not dist.is_main, desc="train", unit="step", dynamic_ncols=True)
    with StopSignals() as signals:
        while step < max_steps:
            elapsed = elapsed_before + time.perf_counter() - t0
            progress = step if not t.max_seconds else max(step, decay_steps * elapsed / t.max_seconds)
            lr = lr_at(progress, t.lr, t.min_lr, t.warmup_steps, decay_steps, t.lr_schedule)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss_sum = 0.0
            for micro in range(accum):
                x, y = sampler.next_batch()
                sync = contextlib.nullcontext() if not dist.enabled or micro == accum - 1 else model.no_sync()
                with sync:
                    with amp():
                        _, loss = model(x, y)
                        if step + 1 == fault_nan_step():
                            loss = loss * float("nan")
                    scaler.scale(loss / accum).backward()
                loss_sum += loss.detach()
            loss_value = (loss_sum / accum).item()
            if not math.isfinite(loss_value):
                bar.close()  # so the error starts its own line
                raise TrainingDiverged(
                    f"the loss became {loss_value} at step {step + 1}; stopped without saving, the last good "
                    "checkpoint is kept (try a lower train.lr or train.grad_clip=1.0)"
                )
            scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(raw_model.parameters(), t.grad_clip or float("inf")).item()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            train_loss = loss_value
            bar.update(1)

            now = time.perf_counter()
            if step % t.log_interval == 0 or step == max_steps:
                tok_per_sec = (step - last_log_step) * tokens_per_step / max(1e-9, now - last_log_time)
                last_log_time, last_log_step = now, step
                logger.scalars(step, {"train/loss": loss_value, "train/lr": lr, "train/grad_norm": grad_norm,
                                      "train/tokens_per_sec": tok_per_sec})
                bar.set_postfix(loss=f"{loss_value:.3f}", tok_s=f"{tok_per_sec:,.0f}", refresh=False)

            out_of_time = bool(t.max_seconds) and elapsed_before + now - t0 >= t.max_seconds
            halt = distributed.any_rank(out_of_time or signals.received is not None, dist, device)
            if signals.received:
                stopped = signals.received
                checkpoint(run_dir / CKPT_NAME, val_loss)
                bar.close()
                tqdm.write(f"stopped by {stopped} at step {step}; checkpoint saved, resume with "
                           f"train.resume={run_dir}")
                break
            if step % t.eval_interval == 0 or step == max_steps or halt:
                train_est, val_loss = evaluate()
                bpc = bits_per_char(val_loss, tokens_per_char)
                logger.scalars(step, {"val/loss": val_loss, "val/bpc": bpc, "train/eval_loss": train_est})
                logger.snapshot(step)
                logger.flush()
                tqdm.write(f"step {step}: train loss {train_est:.4f}, val loss {val_loss:.4f}, val bpc {bpc:.4f}")
                improved = val_loss < best_val
                best_val = min(best_val, val_loss)
                checkpoint(run_dir / CKPT_NAME, val_loss)
                if improved:
                    checkpoint(run_dir / BEST_NAME, val_loss)
            if halt:
                stopped = "max_seconds" if out_of_time else stopped
                break
    bar.close()
    seconds = time.perf_counter() - t0
    if math.isnan(val_loss) and stopped in ("max_steps", "max_seconds"):  # zero steps run (resumed at the end)
        _, val_loss = evaluate()
    sample = ""
    if dist.is_main and stopped in ("max_steps", "max_seconds") and t.sample_chars > 0:
        sample = sample_text(raw_model, tokenizer, val_tokens, t.sample_chars, device, cfg.seed)
        logger.text("samples/final", sample, step)
    val_bpc = bits_per_char(val_loss, tokens_per_char)
    logger.hparams({"model": raw_model.config, "data": cfg.data, "train": cfg.train, "seed": cfg.seed},
                   {"hparam/val_loss": val_loss, "hparam/val_bpc": val_bpc, "hparam/best_val_loss": best_val,
                    "hparam/tokens_per_sec": tok_per_sec, "hparam/params": raw_model.num_parameters()}, step)
    logger.close()
    distributed.cleanup(dist)
    return TrainResult(run_dir, step, train_loss, val_loss, bits_per_char(val_loss, tokens_per_char), best_val,
                       tok_per_sec, seconds, stopped, sample)


def sample_text(model: AttentionLanguageModel, tokenizer, val_tokens, num_tokens: int, device: torch.device,
                seed: int, prompt_tokens: int = 8) -> str:
    """A short sample continuing the first few characters of the validation split."""
    prompt = torch.tensor(val_tokens[:prompt_tokens].astype("int64"), device=device)[None]
    g = torch.Generator(device=device).manual_seed(seed)
    out = model.generate(prompt, num_tokens, temperature=0.8, top_k=None, generator=g)
    return tokenizer.decode(out[0].tolist())
