"""Export a trained run to the Hugging Face format.  python export.py ckpt=<run dir> out=<folder>

The folder loads with `transformers`, and as a `ckpt=` of generate.py, evaluate.py and serve.py (docs/en/export.md)."""

from cli.entry import hydra_script

import shlex
import signal
import sys
from pathlib import Path

from hf_export.config import ExportConfig, register_export_config

SUMMARY = "export.py: write a trained run as a Hugging Face folder (safetensors, tokenizer, model card)."
EXAMPLES = (
    "python export.py ckpt=runs/2026-11-22_17-14-32_model-tiny out=exported/novels",
    "python export.py out=exported/newest                               # the newest run under runs/",
    "python export.py ckpt=runs/2026-11-22_17-14-32_model-tiny/best.pt out=exported/best overwrite=true",
)
COMMAND = "python export.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])  # as typed, for the model card


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)  # unwinds, so the half-written hidden folder is removed on the way out


def _run(c: ExportConfig) -> None:
    signal.signal(signal.SIGTERM, _terminate)
    import torch

    from common.names import shown_name
    from hf_export.writer import write_folder
    from inference.loading import load_run
    from inference.weights import exported_weights
    from model.counts import num_parameters

    run = load_run(c.ckpt, torch.device("cpu"), weights=c.weights)
    out = Path(c.out).expanduser()
    source = run.file.fields() if run.file is not None else None  # the checkpoint it came from, and why that one
    chosen = exported_weights(run.checkpoint, run.weights, source)  # the folder's one set, recorded as such
    layout = write_folder(chosen, run.tokenizer, num_parameters(run.model), out, COMMAND, c.overwrite, c.verify)
    remote = layout == "custom" or run.tokenizer.kind == "jamo"
    how = "the project's own code: load with trust_remote_code=True" if remote else f"stock transformers, {layout}"
    print(shown_name(f"exported {run.source()} to {out} ({how}); {run.weights.line()}"), flush=True)


if __name__ == "__main__":
    register_export_config()
    hydra_script("export", ExportConfig, _run, SUMMARY, EXAMPLES)
