"""Score a text file with a trained model.  python evaluate.py ckpt=<run dir> data.path=<text file> ...

Prints one JSON line (configs/evaluate.yaml); a char model's and a jamo model's bits per character compare directly."""

from cli.entry import hydra_script

from inference.config import EvaluateConfig, register_configs

SUMMARY = "evaluate.py: score a text file with a trained model (one JSON line: loss, bits per character)."
EXAMPLES = (
    "python evaluate.py data.path=~/held_out.txt                        # the newest run under runs/",
    "python evaluate.py ckpt=runs/2026-11-22_17-14-32_model-tiny data.path=~/held_out.txt",
    "python evaluate.py ckpt=runs/2026-11-22_17-14-32_model-tiny/best.pt data.path=~/held_out.txt stride=32",
)


def _run(c: EvaluateConfig) -> None:
    import json

    from common.device import autocast, pick_device, resolve_dtype
    from data.corpus import resolve_corpus_path
    from inference.loading import load_run
    from inference.scoring import evaluate_file, json_ready

    device = pick_device(c.device)
    dtype = resolve_dtype(c.dtype, device, key="dtype")
    run = load_run(c.ckpt, device, weights=c.weights)
    result = evaluate_file(
        run.model,
        run.tokenizer,
        resolve_corpus_path(c.data.path),
        c.stride,
        c.batch_size,
        device,
        lambda: autocast(device, dtype),
        c.progress,
    )
    # which file (chosen: best, last or named; its step and val loss) and which set was scored
    record = {"checkpoint": str(run.path), **(run.file.fields() if run.file else {}), **run.weights.fields(), **result}
    print(json.dumps(json_ready(record), ensure_ascii=False, allow_nan=False), flush=True)


if __name__ == "__main__":
    register_configs()
    hydra_script("evaluate", EvaluateConfig, _run, SUMMARY, EXAMPLES)
