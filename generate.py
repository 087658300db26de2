"""Sample Korean text from a trained model.  python generate.py ckpt=<run dir> prompt=안녕 ...  (see --help)"""

from cli.entry import hydra_script

import sys

from inference.config import GenerateConfig, register_configs

SUMMARY = "generate.py: sample Korean text from a trained model."
EXAMPLES = (
    "python generate.py prompt=옛날에                                   # the newest run under runs/",
    "python generate.py ckpt=runs/2026-11-22_17-14-32_model-tiny prompt=안녕 max_new_tokens=300",
    "python generate.py ckpt=runs/2026-11-22_17-14-32_model-tiny/best.pt num_samples=3 temperature=0.7 top_p=0.9",
)


def _run(c: GenerateConfig) -> None:
    from common.device import pick_device
    from inference.generation import stream_samples
    from inference.loading import load_run

    device = pick_device(c.device)
    run = load_run(c.ckpt, device, weights=c.weights)
    print(run.line(), file=sys.stderr, flush=True)  # which weights of which file; stdout stays the samples alone
    stream_samples(run.model, run.tokenizer, c, device)


if __name__ == "__main__":
    register_configs()
    hydra_script("generate", GenerateConfig, _run, SUMMARY, EXAMPLES)
