"""Score a text file with a trained model.  python evaluate.py ckpt=<run dir> data.path=<text file> ...

Prints one JSON line (see configs/evaluate.yaml); the bits per character of a char model and of a jamo
model are directly comparable."""

from common.cli import quote_non_ascii_overrides, run_cli, run_hydra

import sys

import hydra
from omegaconf import DictConfig


def _run(cfg: DictConfig) -> None:
    import json

    from common.errors import UserError
    from data.corpus import resolve_corpus_path
    from training.config import check_int
    from common.device import autocast, pick_device, resolve_dtype
    from inference.generation import load_model
    from inference.scoring import evaluate_file

    if cfg.data.path in (None, ""):
        raise UserError("pass the text file to score: python evaluate.py ckpt=<run dir> data.path=<file.txt>")
    check_int(cfg, "batch_size")
    check_int(cfg, "stride", optional=True)
    device = pick_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    model, tokenizer, payload = load_model(cfg.ckpt, device)
    result = evaluate_file(model, tokenizer, resolve_corpus_path(cfg.data.path), cfg.stride, cfg.batch_size, device,
                           lambda: autocast(device, dtype), bool(cfg.progress))
    print(json.dumps({"checkpoint": payload["path"], **result}, ensure_ascii=False), flush=True)


@hydra.main(config_path="configs", config_name="evaluate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_cli(lambda: _run(cfg))


if __name__ == "__main__":
    sys.argv[1:] = quote_non_ascii_overrides(sys.argv[1:])
    run_hydra(main)
