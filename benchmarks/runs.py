"""The project's own scripts run from a benchmark as a user runs them, what they print kept, the machine's state, and
the held-out text a campaign scores on.

Design choices:
- Every run is its own process under this interpreter, so a number is what a user's command gets, start-up included.
- A failed process is a record holding its last error line, never an exception: one bad run must not cost a campaign.
- Rows are appended to OUT/results.jsonl and read back at the start, so an interrupted campaign continues.
- Before each run the machine's load and speed are recorded, with a warning when it is not idle.
- The held-out part is the corpus's tail, cut at a document boundary: a blank line where the file has them, else a
  line (nsmc_dev.txt is grouped by film, so its tail is about films the training part never mentions).
- Both parts are written once into the caller's folder, named by the corpus's hash and fraction: reused till it changes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from itertools import accumulate
from pathlib import Path

from benchmarks.options import ROOT
from benchmarks.tb_read import read_scalars
from common.atomic_files import atomic_write, file_sha256
from common.errors import UserError

RESULT = re.compile(
    r"run: (?P<dir>\S+)\s+step (?P<step>\d+)\s+val loss (?P<loss>[\d.]+)\s+val bpc (?P<bpc>[\d.]+)\s+"
    r"(?P<secs>[\d.]+)s \((?P<why>\w+)\)"
)


def last_line(text: str, fallback: str) -> str:
    """The last line of a failed process's stderr (its one `error:` line), or `fallback` where it printed none."""
    return (text.strip().splitlines() or [fallback])[-1]


def python(script: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python SCRIPT ARGS` in this checkout, as a user runs it, its output captured."""
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args], cwd=ROOT, capture_output=True, text=True, env=env
    )


def train_py(overrides: list[str], run_dir: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python train.py OVERRIDES hydra.run.dir=RUN_DIR train.overwrite=true`."""
    return python("train.py", *overrides, f"hydra.run.dir={run_dir}", "train.overwrite=true", env=env)


def trained(overrides: list[str], run_dir: Path, env: dict | None = None, said: tuple[str, ...] = ()) -> dict:
    """One train.py run's numbers, its `run:` line's and what it logged to TensorBoard, or {error: its last line};
    `said`: the starts of the lines it printed to keep (`lines`), as `precision:` and `compile:`."""
    proc = train_py(overrides, run_dir, env)
    m = RESULT.search(proc.stdout)
    lines = {"lines": [line for line in proc.stdout.splitlines() if line.startswith(said)]} if said else {}
    if proc.returncode or m is None:
        return {"error": last_line(proc.stderr, "no result line"), **lines}
    scalars = read_scalars(run_dir)
    tps = sorted(v for _, v in scalars.get("train/tokens_per_sec", []))
    bpcs = [v for _, v in scalars.get("val/bpc", [])]
    return {
        "steps": int(m["step"]),
        "seconds": float(m["secs"]),
        "stopped": m["why"],
        "val_loss": float(m["loss"]),
        "val_bpc": float(m["bpc"]),
        "tokens_per_sec": round(tps[len(tps) // 2]) if tps else None,
        "best_val_bpc": min(bpcs) if bpcs else None,
        **lines,
    }


def campaign_run(
    record: dict,
    overrides: list[str],
    run_dir: Path,
    then: Callable[[dict], dict],
    keys: tuple[str, ...] = ("steps", "seconds", "stopped", "tokens_per_sec"),
) -> dict:
    """A campaign's row: `record`, the machine's state, `trained`'s `keys`, then `then(those numbers)`'s."""
    record = {**record, **machine_before_run()}
    done = trained(overrides, run_dir)
    if "error" in done:
        return {**record, **done}
    return {**record, **{k: done[k] for k in keys}, **then(done)}


def heldout_scores(run_dir: Path, heldout: Path, **more: str) -> dict:
    """`evaluate`'s score of a run as a campaign's row holds it (`more`: {name: its key}), its error if any."""
    scored = evaluate(run_dir, heldout)
    return {
        "heldout_bpc": scored.get("bpc"),
        "heldout_chars": scored.get("chars"),
        **{name: scored.get(key) for name, key in more.items()},
        **({"error": scored["error"]} if "error" in scored else {}),
    }


def printed_json(script: str, *args: str) -> dict:
    """The JSON object `python SCRIPT ARGS` prints last, or {error: its last line}."""
    proc = python(script, *args)
    if proc.returncode:
        return {"error": last_line(proc.stderr, f"{Path(script).name} failed")}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def evaluate(ckpt: Path, heldout: Path) -> dict:
    """`evaluate.py ckpt=CKPT data.path=HELDOUT`'s JSON (a run's best validated weights), or {error: ...}."""
    return printed_json("evaluate.py", f"ckpt={ckpt}", f"data.path={heldout}", "progress=false")


def sample(run_dir: Path, prompt: str, max_new_tokens: int, *extra: str) -> str:
    """What `generate.py ckpt=RUN_DIR prompt=PROMPT` prints, or why it failed."""
    proc = python("generate.py", f"ckpt={run_dir}", f"prompt={prompt}", f"max_new_tokens={max_new_tokens}", *extra)
    return proc.stdout.strip() if proc.returncode == 0 else f"(generate.py failed: {proc.stderr.strip()[-200:]})"


def run_facts(run_dir: Path) -> dict:
    """Parameters, tokens per step and the dropout the run trained with, from the checkpoint a reader reads."""
    import torch

    from inference.loading import load_run
    from model.counts import num_parameters

    try:
        run = load_run(run_dir, torch.device("cpu"))
    except Exception:  # noqa: BLE001 - facts are a nicety; the run's error, if any, is reported elsewhere
        return {}
    t = run.checkpoint.config.get("train", {})
    tokens = t.get("batch_size", 0) * run.model.context_length * t.get("grad_accum_steps", 1)
    return {"params": num_parameters(run.model), "tokens_per_step": tokens, "dropout": run.model.config.dropout}


def results(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def kept(key: dict, done: list[dict]) -> dict | None:
    """The last row of `done` that has `key`'s values and no error: a run a continued campaign does not repeat."""
    return next((r for r in reversed(done) if "error" not in r and all(r.get(k) == v for k, v in key.items())), None)


def keep(record: dict, path: Path) -> dict:
    """One row: printed as a JSON line and appended to `path`; returned."""
    line = json.dumps(record, ensure_ascii=False)
    print(line, flush=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(line + "\n")
    return record


def cpu_busy(seconds: float = 2.0) -> float | None:
    """The share of all CPUs busy over the next `seconds` (/proc/stat; None without it): the campaign sleeps
    meanwhile, so this is what other programs use, without the run that just ended (which the load average counts)."""

    def sample_stat() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)  # total, idle + iowait

    try:
        total0, idle0 = sample_stat()
        time.sleep(seconds)
        total1, idle1 = sample_stat()
    except (OSError, ValueError, IndexError):
        return None
    return round(1 - (idle1 - idle0) / max(total1 - total0, 1), 3)


def reference_speed(reps: int = 150, rounds: int = 3) -> float:
    """GFLOP/s of a fixed float32 matmul now: an idle machine still changes speed, so runs compare only if it held."""
    import torch

    from benchmarks.timing import mean_seconds, median_alternating

    a, b = torch.randn(256, 1024), torch.randn(1024, 1024)
    a @ b  # warm-up
    seconds = median_alternating({"matmul": mean_seconds(lambda: a @ b, reps)}, rounds)["matmul"]
    return round(2 * 256 * 1024 * 1024 / seconds / 1e9, 1)


def machine_before_run() -> dict:
    busy = cpu_busy()
    if busy is not None and busy > 0.1:
        print(f"warning: the machine is not idle ({busy:.0%} of the CPUs busy); timings will be low", file=sys.stderr)
    return {"load_before": round(os.getloadavg()[0], 2), "cpu_busy_before": busy, "reference_gflops": reference_speed()}


def tail_boundary(lines: list[str], fraction: float) -> int:
    """Index of the first held-out line: about `fraction` of the characters, at the nearest document boundary."""
    target = sum(map(len, lines)) * (1 - fraction)
    cut = next(i for i, seen in enumerate(accumulate(map(len, lines), initial=0)) if seen >= target)
    blanks = [i + 1 for i, line in enumerate(lines) if not line.strip() and i + 1 < len(lines)]
    if blanks:
        cut = min(blanks, key=lambda b: abs(b - cut))
    return max(1, min(cut, len(lines) - 1))


def corpus_fingerprint(corpus: str | Path) -> str:
    """The first 12 hex digits of the corpus file's SHA-256: what the ladder's rows record, and its splits' names."""
    return file_sha256(Path(corpus).expanduser())[:12]


def split_heldout(corpus: str | Path, out_dir: str | Path, fraction: float = 0.05) -> tuple[Path, Path]:
    """(training file, held-out file) for `corpus`, written under `out_dir` on first use."""
    from data.text import read_text

    corpus = Path(corpus).expanduser()
    out = Path(out_dir) / f"{corpus.stem}-{corpus_fingerprint(corpus)}-{fraction:g}"
    train, heldout = out / "train.txt", out / "heldout.txt"
    if train.is_file() and heldout.is_file():
        return train, heldout
    lines = read_text(corpus).splitlines(keepends=True)  # train.py's checks: encoding, bad bytes, pipes
    if len([line for line in lines if line.strip()]) < 2:
        raise UserError(f"the corpus {corpus} has fewer than two lines of text: nothing can be held out of it")
    out.mkdir(parents=True, exist_ok=True)
    cut = tail_boundary(lines, fraction)
    atomic_write(train, ("".join(lines[:cut]).rstrip("\n") + "\n").encode("utf-8"))
    atomic_write(heldout, "".join(lines[cut:]).encode("utf-8"))
    return train, heldout
