"""Helpers shared by the tests: the one CLI runner, the one tiny-model factory, and what they check.

Entry scripts run as a user runs them (their own process, the real command line; by default forked from a
warm interpreter that imported torch once, tests/warm_python.py); models for unit tests come from `tiny_model`,
small enough to run in milliseconds.
"""

from __future__ import annotations

import atexit
import os
import queue
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from model.streaming import stream
from tests.warm_python import WarmPython

ROOT = Path(__file__).resolve().parent.parent
SHARED_CORPUS = ROOT.parent / "shared" / "corpora" / "koconovel_dev.txt"

# A tiny model on the CPU, evaluated cheaply: every run of the robustness tests starts from these.
TINY = (
    "model=tiny",
    "device=cpu",
    "train.batch_size=2",
    "train.eval_steps=1",
    "train.sample_chars=0",
    "train.log_interval=1",
    "train.sample_tokens=0",
    "train.attention_tokens=0",
)

# Our own sentences (written for these tests, from no corpus); about 300 characters, all of them in CP949.
KOREAN = (
    "봄이 오면 강가에 벚꽃이 핀다. 아이들은 자전거를 타고 둑길을 달린다.\n"
    "할머니는 마루에 앉아 콩나물을 다듬으며 라디오를 들으셨다.\n"
    '"내일은 비가 온대요." 동생이 창밖을 보며 말했다.\n'
    "우리는 시장에서 떡볶이와 순대를 사 먹고, 버스를 두 번 갈아타고 집으로 돌아왔다.\n"
    "밤하늘에 별이 총총하고 멀리서 개 짖는 소리가 들렸다. 시계는 11시 45분을 가리켰다.\n"
    "겨울 방학에는 눈사람을 만들고 썰매를 탔다. 손이 꽁꽁 얼어도 웃음이 끊이지 않았다.\n"
    "편지 봉투에 우표를 붙이고 우체국까지 걸어갔다. 답장은 언제쯤 올까?\n"
)


def _env(extra: dict | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("KOCHAR_DEBUG", "HYDRA_FULL_ERROR")}
    # One thread per process: tiny models gain nothing from more, and with two processes per two cores
    # (or a busy machine) OpenMP's spinning threads make each step up to a hundred times slower.
    return {**env, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **(extra or {})}


# train.compile=auto would time a test's first steps and might compile a long-limited one (a run only a signal
# stops): tests train eagerly unless they name train.compile (tests/training/test_runner.py).
TRAINING_SCRIPTS = ("train.py", "tests/e2e/fault_nan.py", "tests/e2e/fault_save.py")


def _command(args: tuple[str, ...]) -> list[str]:
    script, *rest = args
    if script in TRAINING_SCRIPTS and not any(a.startswith(("train.compile=", "-")) for a in rest):
        rest.append("train.compile=false")
    return [sys.executable, str(ROOT / script) if script.endswith(".py") else script, *rest]


# Commands of ours may run through the warm interpreter (tests/warm_python.py): the same process a user starts,
# with torch already imported. Others (pip, torchrun, tensorboard) always start a fresh interpreter.
WARM_MODULES = ("benchmarks.", "data.")
_warm: dict[int, WarmPython | None] = {}
_warm_lock = threading.Lock()


def _warm_python(args: tuple[str, ...], env: dict) -> WarmPython | None:
    ours = args[0].endswith(".py") or (args[0] == "-m" and args[1].startswith(WARM_MODULES))
    if not ours or os.environ.get("KOCHAR_TEST_WARM") == "0":
        return None
    with _warm_lock:
        if os.getpid() not in _warm:
            try:
                warm = _warm[os.getpid()] = WarmPython(_env(None))
                atexit.register(warm.close)
            except RuntimeError as e:  # every command then starts a fresh interpreter, as with KOCHAR_TEST_WARM=0
                _warm[os.getpid()] = None
                print(f"tests/helpers.py: {e}; commands start fresh interpreters", file=sys.stderr)
    warm = _warm[os.getpid()]
    # anything read at interpreter start must be what this command would read: only the server's own environment
    return warm if warm is not None and warm.serves(env) else None


def cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 300):
    """The one way tests run an entry script: `python <script> args...` (a `.py` path relative to the
    repository root, or `-m module`), from the repository root or `cwd`, as a user would; waits for it."""
    command, environment = _command(args), _env(env)
    warm = _warm_python(args, environment)
    if warm is not None:
        return warm.run(command, cwd or ROOT, timeout, environment)
    return subprocess.run(command, cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout, env=environment)


def start(*args: str, env: dict | None = None) -> subprocess.Popen:
    """Start `python <script> args...` without waiting (stdout and stderr piped, text mode)."""
    return subprocess.Popen(
        _command(args), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(env)
    )


def cli_all(*commands: tuple[str, ...], env: dict | None = None) -> list:
    """Run independent commands two at a time (this machine has two cores); results in order."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda c: cli(*c, env=env), commands))


class LineReader:
    """Reads a running process's stdout on a thread, so a test can wait for a line with a timeout; stderr is
    drained on another thread (a full pipe would block the process) and kept in `stderr_chunks`."""

    def __init__(self, proc: subprocess.Popen):
        self.lines: list[str] = []
        self.stderr_chunks: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True).start()
        self._err = threading.Thread(target=lambda: self.stderr_chunks.extend(proc.stderr), daemon=True)
        self._err.start()

    def stderr(self, timeout: float = 30) -> str:
        self._err.join(timeout)
        return "".join(self.stderr_chunks)

    def _pump(self, stream) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)

    def _lines_until(self, deadline: float):
        """Yield new lines (recording them) until the stream ends or the deadline passes."""
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                return
            if line is None:
                return
            self.lines.append(line)
            yield line

    def wait_for(self, prefix: str, timeout: float = 120) -> str:
        for line in self._lines_until(time.monotonic() + timeout):
            if line.startswith(prefix):
                return line
        raise AssertionError(f"no line starting with {prefix!r}; got:\n{''.join(self.lines)}")

    def rest(self, timeout: float = 60) -> str:
        """Everything printed after the lines seen so far, up to the end of the stream."""
        for _ in self._lines_until(time.monotonic() + timeout):
            pass
        return "".join(self.lines)


def stderr_lines(stderr: str) -> list[str]:
    """Non-blank stderr lines; tqdm redraws with carriage returns, so those count as line breaks too."""
    return [line for line in stderr.replace("\r", "\n").splitlines() if line.strip()]


def assert_one_line_error(r, *needles: str, code: int = 2) -> str:
    """Exit `code`, nothing on stdout, exactly one stderr line `error: ...` containing every needle."""
    out = f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert r.returncode == code, out
    assert "Traceback" not in r.stderr + r.stdout, out
    lines = stderr_lines(r.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), out
    assert r.stdout.strip() == "", out
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


def tiny_model(attention: str = "fused", seed: int = 0, **settings):
    """The one model factory of the unit tests: a 2-block, 32-wide model over 50 ids, in eval mode; any
    `ModelConfig` field can be overridden."""
    import torch

    from model import AttentionLanguageModel

    torch.manual_seed(seed)
    config = dict(
        vocab_size=50,
        context_length=16,
        embedding_size=32,
        head_size=32,
        num_heads=4,
        num_blocks=2,
        dropout=0.0,
        attention=attention,
    )
    return AttentionLanguageModel(**{**config, **settings}).eval()


def scalar_tags(run_dir) -> dict:
    """{tag: [(step, value), ...]} from a run's TensorBoard event files."""
    from benchmarks.tb_read import read_scalars

    return read_scalars(run_dir)


def train_compiled(tmp_path: Path, *overrides: str):
    """`train.py model=tiny train.compile=true <overrides>` into tmp_path/run -> (run dir, its checkpoint).

    Checks that it succeeded and that the compile (`_orig_mod.`) and DDP (`module.`) wrappers' prefixes never
    reach the saved state dict."""
    from inference.checkpoint import load_checkpoint

    run = tmp_path / "run"
    r = cli(
        "train.py",
        "model=tiny",
        "train.compile=true",
        *overrides,
        f"hydra.run.dir={run}",
        f"data.cache_dir={tmp_path / 'cache'}",
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    said = [line for line in r.stdout.splitlines() if line.startswith("compile: ")]
    assert said[0].startswith("compile: inductor") and "(train.compile=true" in said[0], r.stdout
    assert any(line.startswith("compile: warm-up took ") for line in said), r.stdout
    payload = load_checkpoint(run / "ckpt.pt")
    assert not any(k.startswith(("_orig_mod.", "module.")) for k in payload.model)
    return run, payload


def assert_bf16_cached_matches_uncached(model, idx, steps: int, device_type: str) -> None:
    """Cached and uncached generation under bf16 autocast give logits within 2% (relative) at every step,
    up to the first step where a bf16 near-tie made them pick different tokens (later inputs differ)."""
    import torch

    with torch.autocast(device_type, dtype=torch.bfloat16):
        a = list(stream(model, idx, steps, temperature=0, use_cache=True))
        b = list(stream(model, idx, steps, temperature=0, use_cache=False))
    for (ta, x), (tb, y) in zip(a, b, strict=True):
        assert (x - y).norm() / y.norm() < 2e-2
        if not torch.equal(ta, tb):
            break


def compose_config(name: str = "train", *overrides: str):
    """Compose `configs/<name>.yaml` with overrides as the entry script would (schemas and resolvers
    registered), without running anything -> DictConfig."""
    from hydra import compose, initialize_config_dir

    from cli.hydra_setup import register_resolvers
    from inference.config import register_configs as register_inference
    from training.settings.config import register_configs as register_training

    register_resolvers()
    register_training()
    register_inference()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose(config_name=name, overrides=list(overrides))


def config_object(name: str = "train", *overrides: str):
    """The composed config as its checked dataclass (TrainJob, GenerateConfig, ...)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_object(compose_config(name, *overrides))


def train_job(tmp_path: Path, *overrides: str):
    """A TrainJob for a tiny, quickly evaluated CPU run whose token cache stays under tmp_path."""
    pinned = () if any(o.startswith("train.compile=") for o in overrides) else ("train.compile=false",)
    return config_object(
        "train",
        "model=tiny",
        "train.batch_size=4",
        "train.eval_steps=2",
        "train.sample_chars=0",
        "device=cpu",
        f"data.cache_dir={tmp_path / 'cache'}",
        *pinned,
        *overrides,
    )


def same_precision(run: Path) -> str:
    """The override that trains in the precision an earlier run resolved: on a CPU with bf16 instructions
    `train.dtype=auto` times both, so two runs compared for identical results must not each measure."""
    from inference.checkpoint import load_checkpoint

    return f"train.dtype={load_checkpoint(run / 'ckpt.pt').config['train']['dtype']}"


# A tiny training that only a signal or a fault stops (crash-safety and fault tests).
ENDLESS = ("train.py", *TINY, "train.max_steps=100000", "train.lr_decay_steps=1000")


@contextmanager
def small_disk(folder: Path, size: str = "64k", read_only: bool = False):
    """A tmpfs of `size` mounted at `folder` (a disk that fills up, or a read-only one), unmounted afterwards;
    the test is skipped where one cannot be mounted (not root, or a container that forbids it)."""
    import pytest

    folder.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    try:
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        r = None
    if r is None or r.returncode:
        pytest.skip("a tmpfs cannot be mounted here (root and a permissive container are needed)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


def draw(logits, temperature: float = 1.0, top_k=None, top_p=None, generator=None):
    """logits (B, V) -> the next ids (B, 1) the one Sampler of every caller (model/sampling.py) draws with these
    settings: greedy at temperature 0."""
    from model.sampling import Sampler

    sampler = Sampler(logits.shape[-1], logits.device)
    sampler.set(temperature, top_k, top_p, None)
    return sampler(logits.float(), generator)
