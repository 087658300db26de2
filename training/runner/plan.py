"""`train.compile`: false, true or auto, and what auto decides for this device, precision and run.

Design choices (docs/en/training.md, "Compile", has the rules and the priors' measurements):
- Four ways: eager, `inductor` (torch.compile's default mode), `graph` (CUDA: the whole step captured and replayed),
  and both. `true` asks for the fastest the device has.
- `auto` compiles only where `left x (1 - 1/speedup)` is `PAYBACK` times the warm-up (scaled by the load per core),
  `left` being the eager seconds left, halved where early stopping may act; inductor needs `MIN_INDUCTOR_STEPS` left,
  and a speedup measured under `KEEP` never compiles again.
- The speedup and warm-up are this machine's where a run measured them (`records_path`, keyed by what decides a
  compile's cost and gain), else the priors below. A hint, never a requirement: what the file holds in another shape
  reads as absent, and a file that cannot be written is said in one line; the run goes on either way.
- A CPU compiles only in bfloat16 with bf16 instructions, or where this machine measured a speedup; MPS stays eager.
  Under torchrun every rank takes the same choice, and no CUDA graph is used (DDP's all-reduce runs between the
  step's kernels).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from common.atomic_files import atomic_write, user_cache_dir
from common.config_checks import is_positive, refusal
from common.device import has_native_bf16
from common.errors import os_error_cause

SPELLINGS = {**dict.fromkeys(("true", "yes", "on"), "true"), **dict.fromkeys(("false", "no", "off"), "false")}
SPELLINGS["auto"] = "auto"
PROBE_STEPS = 8  # eager steps timed before auto decides (the first, which allocates, is not timed)
COMPARE_STEPS = 12  # compiled steps timed after the warm-up, against the eager ones
PAYBACK = 2.0  # what compiling must save, in multiples of its warm-up
KEEP = 1.1  # a compiled step this much faster than an eager one is kept, else the run goes back to eager
MIN_INDUCTOR_STEPS = 1000
GRAPH_SPEEDUP, GRAPH_WARMUP = 3.0, 0.5  # priors: a CUDA graph of a launch-bound step; its capture, seconds
CUDA_INDUCTOR_SPEEDUP, CUDA_INDUCTOR_WARMUP = 1.3, 20.0  # inductor's kernels under the graph; its compile
CUDA_INDUCTOR_ALONE = 1.15  # inductor without a graph (the launches stay)
CPU_BF16_INDUCTOR_SPEEDUP, CPU_INDUCTOR_WARMUP = 1.6, 25.0  # bf16 on a CPU with bf16 instructions
CPU_OTHER_INDUCTOR_SPEEDUP = 1.05  # float32, emulated bf16: under KEEP, so only a speedup measured here compiles


def compile_setting(value: object) -> str:
    """train.compile as false, true or auto: YAML's booleans (OmegaConf hands a str field "True"), checkpoints
    written when the key was a boolean, and the words for them."""
    word = str(value).lower()
    if word not in SPELLINGS:
        raise refusal("train.compile", value, "it must be true, false or auto", lambda w: w.lower() in SPELLINGS)
    return SPELLINGS[word]


@dataclass(frozen=True)
class Way:
    """How the steps run: `inductor` compiles the model, `graph` captures the whole step (CUDA only)."""

    inductor: bool = False
    graph: bool = False

    @property
    def name(self) -> str:
        parts = [n for n, on in (("inductor", self.inductor), ("a CUDA graph of the whole step", self.graph)) if on]
        return " and ".join(parts) or "eager"


EAGER = Way()


@dataclass(frozen=True)
class Costs:
    """What inductor is expected to give and cost in this run: a step `speedup` times faster, a `warmup` in seconds,
    and where the numbers come from (`source`, said in the choice's line)."""

    speedup: float
    warmup: float
    source: str


def prior_costs(device: torch.device, dtype: torch.dtype) -> Costs:
    if device.type != "cpu":
        return Costs(CUDA_INDUCTOR_SPEEDUP, CUDA_INDUCTOR_WARMUP, "not measured on this machine yet")
    speedup = CPU_BF16_INDUCTOR_SPEEDUP if cpu_gains(device, dtype) else CPU_OTHER_INDUCTOR_SPEEDUP
    return Costs(speedup, CPU_INDUCTOR_WARMUP, "not measured on this machine yet")


def cpu_gains(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether inductor is expected to pay on this CPU without a measurement: bf16 with bf16 instructions."""
    return dtype == torch.bfloat16 and has_native_bf16(device)


def load_factor() -> float:
    """How much slower than alone a compile runs now: the processes waiting per core, at least 1."""
    try:
        return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    except OSError:
        return 1.0


def graph_blocker(device: torch.device, distributed: bool, mtp: bool) -> str | None:
    """Why this run's step cannot be one CUDA graph, or None when it can."""
    if device.type != "cuda":
        return "CUDA graphs need a CUDA device"
    if distributed:
        return "under torchrun DDP's all-reduce runs between the step's kernels"
    if mtp:
        return "train.mtp_weights fade at every step"
    return None


def fixed_way(
    setting: str, device: torch.device, dtype: torch.dtype, blocker: str | None, measured: bool = False
) -> tuple[Way, str] | None:
    """The way and its reason when it needs no measurement; None when auto must time the run first (`measured`: this
    machine holds a record of this run's compile, which auto weighs even where the priors would not compile)."""
    if setting == "false":
        return EAGER, "train.compile=false"
    if setting == "true":
        if device.type == "cuda" and blocker is None:
            return Way(inductor=True, graph=True), "train.compile=true"
        why = "train.compile=true" + (f"; no CUDA graph: {blocker}" if device.type == "cuda" else "")
        return Way(inductor=True), why
    if device.type == "mps":
        return EAGER, "train.compile=auto; compile is not measured on MPS"
    if device.type == "cpu" and not cpu_gains(device, dtype) and not measured:
        kind = "float32" if dtype == torch.float32 else "emulated bfloat16"
        return EAGER, (
            f"train.compile=auto; inductor gains little over {kind} on this CPU, never its "
            f"{CPU_INDUCTOR_WARMUP:.0f}-s warm-up"
        )
    return None


def pays(left_seconds: float, speedup: float, warmup: float) -> bool:
    """Whether `left_seconds` of eager steps, run `speedup` times faster, save PAYBACK x `warmup`."""
    return left_seconds * (1.0 - 1.0 / speedup) >= PAYBACK * warmup


def inductor_pays(left_seconds: float, steps_left: float, costs: Costs) -> bool:
    """Whether inductor pays back its warm-up (slowed by the load) in what is left; never where its steps were
    measured less than `KEEP` times faster, which a run would only give back after the warm-up."""
    return (
        costs.speedup >= KEEP
        and steps_left >= MIN_INDUCTOR_STEPS
        and pays(left_seconds, costs.speedup, costs.warmup * load_factor())
    )


def measured_way(
    device: torch.device,
    left_seconds: float,
    steps_left: float,
    blocker: str | None,
    costs: Costs,
    inductor_ok: bool = True,
) -> tuple[Way, str]:
    """auto's choice for a run with `left_seconds` of eager steps (`steps_left` steps) left to charge, and the
    reason. `inductor_ok`: False where inductor cannot build the run's kernels (bfloat16 on a card that emulates it)."""
    left = f"about {left_seconds:,.0f} s of eager steps left to pay it back"
    expected = (
        f"steps about {costs.speedup:.2f}x faster compiled, a warm-up of about {costs.warmup:.0f} s ({costs.source})"
    )
    if device.type == "cpu":
        if inductor_pays(left_seconds, steps_left, costs):
            return Way(inductor=True), f"train.compile=auto; {left}, {expected}"
        if costs.speedup < KEEP:
            return EAGER, f"train.compile=auto; compiled steps are not {KEEP:g}x faster on this CPU ({expected})"
        return EAGER, f"train.compile=auto; {left}, too few for inductor's warm-up ({expected})"
    alone = Costs(min(costs.speedup, CUDA_INDUCTOR_ALONE), costs.warmup, costs.source)
    if blocker is not None:  # CUDA without a graph: inductor alone, where it pays
        if inductor_ok and inductor_pays(left_seconds, steps_left, alone):
            return Way(inductor=True), f"train.compile=auto; {left}; no CUDA graph: {blocker}"
        return EAGER, f"train.compile=auto; {left}, too few to pay back inductor's warm-up; no CUDA graph: {blocker}"
    if not pays(left_seconds, GRAPH_SPEEDUP, GRAPH_WARMUP):
        return EAGER, f"train.compile=auto; {left}, too few to pay back a CUDA graph's capture"
    inductor = inductor_ok and inductor_pays(left_seconds / GRAPH_SPEEDUP, steps_left, costs)
    more = "" if inductor else "; inductor only for a run long enough to pay its compile"
    return Way(inductor=inductor, graph=True), f"train.compile=auto; {left}{more}"


def worth_a_line(device: torch.device, dtype: torch.dtype, way: Way, measured: bool = False) -> bool:
    """Where the choice is said: as the precision line (every GPU run, a CPU run that autocasts), whenever something
    compiles, and where this machine's own measurements decided it."""
    return device.type != "cpu" or dtype != torch.float32 or way != EAGER or measured


WARM_SHARE = 0.3  # a warm inductor cache's warm-up against a cold one's (docs/en/training.md)
KEPT = 200  # records kept, the newest


def records_path() -> Path:
    return user_cache_dir("compile_records.json")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")
    except OSError:
        cpu = ""
    return f"{cpu or platform.processor() or device.type} x{os.cpu_count()}"


def record_key(device: torch.device, dtype: torch.dtype, way: Way, model_config, batch: int) -> str:
    settings = json.dumps(asdict(model_config), sort_keys=True, default=str)
    model = hashlib.sha256(settings.encode()).hexdigest()[:16]
    return f"{device_name(device)}|torch {torch.__version__}|{dtype}|{way.name}|{model}|batch {batch}"


# What a record may hold, each field with its test: anything else in the file (another shape, another type, a
# negative or non-finite number) is ignored, so a hand-edited file can mislead no choice and end no run.
RECORD_FIELDS = {
    "warmup_s": is_positive,
    "speedup": is_positive,
    "eager_ms": is_positive,
    "compiled_ms": is_positive,
    "warm": lambda v: isinstance(v, bool),
    "cache": lambda v: isinstance(v, str),
}


def usable_record(value: object) -> dict:
    """The fields of a stored record that this code can use; {} for anything that is not a mapping."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if k in RECORD_FIELDS and RECORD_FIELDS[k](v)}


def read_all() -> dict[str, dict]:
    """Every record of the file with something usable in it; a missing or unreadable file reads as empty."""
    try:
        stored = json.loads(records_path().read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: nesting too deep for the parser
        return {}
    if not isinstance(stored, dict):
        return {}
    return {key: record for key, value in stored.items() if (record := usable_record(value))}


def write_record(key: str, **values: float | bool | str) -> str | None:
    """Merge `values` into the record of `key`, keeping the newest `KEPT` records, the folder made where missing.
    Returns why the file could not be written (a few words), or None once it is."""
    records = read_all()
    records[key] = {**records.pop(key, {}), **usable_record(values)}
    path = records_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(dict(list(records.items())[-KEPT:]), indent=1))
    except OSError as e:
        return os_error_cause(e)
    return None


def inductor_cache_counts() -> tuple[int, int]:
    """(hits, misses) of inductor's compiled-graph cache in this process so far; (0, 0) where torch counts neither."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return 0, 0
    return counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]


def measured_costs(key: str, device: torch.device, dtype: torch.dtype, cache_folder: str | None) -> Costs:
    """Inductor's expected speedup and warm-up for the run of `key`: this machine's, where a run measured them (the
    warm-up a share of a cold one while inductor's cache folder is still there), else the priors."""
    prior, record = prior_costs(device, dtype), read_all().get(key, {})
    if not record.keys() & {"speedup", "warmup_s"}:
        return prior
    speedup = float(record.get("speedup", prior.speedup))
    if "warmup_s" not in record:
        return Costs(speedup, prior.warmup, "speedup measured here before")
    cold = float(record["warmup_s"]) / (WARM_SHARE if record.get("warm") else 1.0)
    cached = cache_folder is not None and record.get("cache") == cache_folder
    return Costs(speedup, cold * WARM_SHARE if cached else cold, "measured here before")
