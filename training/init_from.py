"""Starting a new run from another run's weights: `train.init_from=<run or checkpoint>` (fine-tuning).

Design choices:
- A new run in every way but its first weights: its own folder, step 0, a fresh optimizer and schedule, this
  command line's settings ("finetuning is no different than training, start from a pretrained model").
- The architecture (and tokenizer kind) is the source's; a model key typed that contradicts it is refused in one
  line naming every such key (`model.dropout` and `model.attention` stay the user's).
- Characters the source never saw extend the tokenizer (old ids keep their meaning); their embedding rows start at
  the mean of the known rows and their output rows at `<unk>`'s, so predictions on known text barely move.
- The source's weights are chosen as every reader chooses them (inference/run_files.py, inference/weights.py), and
  the start says which file and which set. The run records where it started (config, checkpoints, HParams).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from common.errors import UserError
from data.corpus import Corpus, load_corpus
from data.corpus_files import corpus_files
from inference.checkpoint import Checkpoint, load_checkpoint, usable
from inference.run_files import RunFile, run_file
from inference.weights import WeightsUsed, choose_weights
from tokenizer import tokenizer_from_dict
from training.settings.config import TrainJob
from training.settings.resume import MODEL_CHANGEABLE, typed_command_line

# The parameters with a row per token, and the row of <unk> in each (model.head=jamo's first stage holds the 19
# initials, then <unk>, then the ids after the syllables: new ids append there too).
GROWN = {"token_embedding.weight": 0, "lm_head.weight": 0, "lm_head.stage1.weight": 19}


@dataclass
class InitSource:
    checkpoint: Checkpoint
    used: WeightsUsed  # which of the source's weights start the run (train.init_weights, as the readers choose)
    file: RunFile  # which file of the source run, and why (inference/run_files.py)
    added: list[str] = field(default_factory=list)  # tokens of the new text the source never saw (load_init_data)

    def record(self) -> dict:
        return {
            "from": str(self.checkpoint.path),
            "step": self.checkpoint.step,
            "added_tokens": len(self.added),
            "chosen": self.file.chosen,
            "val_loss": self.file.fields()["val_loss"],
            **self.used.fields(),
        }

    def line(self) -> str:
        shown = "".join(self.added[:20]).replace("\n", "\\n") + ("..." if len(self.added) > 20 else "")
        added = (
            f"; {len(self.added)} character(s) it never saw were added to the vocabulary ({shown})"
            if self.added
            else "; the new text holds no character it had not seen"
        )
        return f"init_from {self.file.words()}: a new run from its weights: {self.used.words()}{added}"


def load_source(job: TrainJob) -> InitSource | None:
    """The checkpoint `train.init_from` names (a run folder: its best validated weights) and the weights it starts
    the run from, with the architecture it fixes applied to `job`; None without."""
    if not job.train.init_from:
        return None
    if job.train.resume:
        raise UserError("train.init_from starts a new run and train.resume continues one: pass only one of them")
    chosen = run_file(job.train.init_from, key="train.init_from")
    source = load_checkpoint(chosen.path)
    used = choose_weights(source, job.train.init_weights, "train.init_weights")  # a set it lacks: refused at once
    usable(source, used.kind)  # finite weights that compute finite logits (inference/weight_checks.py)
    adopt_architecture(job, source)
    return InitSource(source, used, chosen)


def adopt_architecture(job: TrainJob, source: Checkpoint) -> None:
    """Give `job` the source's model settings and tokenizer kind; a typed contradiction is one UserError."""
    typed = typed_command_line()
    conflicts = []
    for key, value in source.model_config.to_dict().items():
        dotted = f"model.{key}"
        if dotted in MODEL_CHANGEABLE or key == "vocab_size":
            continue
        if typed is not None and (dotted in typed or "model" in typed) and getattr(job.model, key) != value:
            conflicts.append(f"{dotted}={getattr(job.model, key)} (the source has {value})")
    kind = source.tokenizer.get("kind", "char") if isinstance(source.tokenizer, dict) else "char"
    if typed is not None and "data.tokenizer" in typed and job.data.tokenizer != kind:
        conflicts.append(f"data.tokenizer={job.data.tokenizer} (the source has {kind})")
    if conflicts:
        raise UserError(
            f"train.init_from={job.train.init_from} fixes the architecture, but this command line "
            f"changes it: {'; '.join(conflicts)}; drop those overrides"
        )
    keep = {k: getattr(job.model, k) for k in ("dropout", "attention")}
    job.model = replace(source.model_config, vocab_size=None, **keep)
    job.data.tokenizer = kind


def load_init_data(job: TrainJob, init: InitSource) -> Corpus:
    """The new corpus under the source's tokenizer, extended by whatever the new text holds that it lacks (those
    characters recorded in `init.added`)."""
    tokenizer = tokenizer_from_dict(init.checkpoint.tokenizer)
    corpus = load_corpus(job.data.path, tokenizer, job.data.cache_dir)
    if corpus.num_unknown:
        bigger = tokenizer.extended(corpus_files(corpus.path).chunks())
        init.added = list(bigger.to_dict().get("added", []))[len(tokenizer.to_dict().get("added", [])) :]
        corpus = load_corpus(job.data.path, bigger, job.data.cache_dir)
    return corpus


def grown_state(weights: dict[str, torch.Tensor], vocab_size: int, tied: bool) -> dict[str, torch.Tensor]:
    """The source's weights with rows for the tokens added after its vocabulary (see the module docstring;
    with tied weights one matrix serves both ends, and `<unk>`'s row keeps the predictions)."""
    out = dict(weights)
    old_vocab = weights["token_embedding.weight"].shape[0]
    for name, unk in GROWN.items():
        if name not in out:
            continue
        old = out[name]
        extra = vocab_size - old_vocab
        if extra <= 0:
            continue
        row = old.mean(dim=0) if name == "token_embedding.weight" and not tied else old[unk]
        out[name] = torch.cat([old, row.expand(extra, -1).clone()])
    return out
