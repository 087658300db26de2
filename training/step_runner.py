"""The loop's steps, run the way `train.compile` chose (training/compile_plan.py): eager, compiled, as a CUDA graph.

Design choices:
- `auto` needs the run's own speed: the first steps run eagerly (they are real steps), a few of them are timed, and
  the choice follows from what is left of the run. `true` and `false` choose at the first step.
- The warm-up happens inside the loop, so it counts against `train.max_seconds` like any step; the run says what it
  chose and why, and then how long the warm-up took.
- What cannot be built is said in one line and the steps go on without it: a CUDA graph whose capture fails runs
  compiled or eager, a model inductor cannot compile runs eager (its first step is retried eagerly).
- Evaluation, snapshots and the closing sample use the raw model, eagerly (`Session.eval_model`): never the compiled
  training graph, which would compile again for evaluation's mode, and never a replay.
"""

from __future__ import annotations

import math
import time

import torch
from tqdm import tqdm

from common.device import has_native_bf16
from model.cuda_graph import CudaGraph
from training import distributed
from training.compile_plan import (
    EAGER,
    PROBE_STEPS,
    Way,
    compile_setting,
    fixed_way,
    graph_blocker,
    measured_way,
    worth_a_line,
)
from training.graph_step import GraphStep, GraphUnavailable
from training.setup import LoopState, Session
from training.step import StepResult, train_step


def inductor_cache() -> str:
    """Where inductor keeps its compiled kernels between runs (TORCHINDUCTOR_CACHE_DIR, else its default)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        return cache_dir()
    except (ImportError, OSError):  # a torch without the helper: its documented default
        return "inductor's cache folder"


class StepRunner:
    """Calls `train_step`, or its compiled or graphed form, for each step of the loop."""

    def __init__(self, s: Session, graph_backend=None, way: Way | None = None):
        """`way`: a way chosen by the caller (the benchmarks), instead of train.compile's."""
        t = s.job.train
        self.s = s
        self.blocker = graph_blocker(s.device, s.dist.enabled, bool(t.mtp_weights))
        self.graph_backend = graph_backend  # session -> backend; None: a real CUDA graph (tests pass a stand-in)
        self.way: Way | None = None
        self.graph: GraphStep | None = None
        self.timing: tuple[int, float] | None = None  # (step, time) where auto's timed steps began
        self.warming: float | None = None  # when the chosen way started to warm up
        setting = compile_setting(t.compile)
        fixed = fixed_way(setting, s.device, s.dtype, self.blocker) if way is None else (way, "chosen by the caller")
        if fixed is not None:
            self._adopt(*fixed, said=setting == "false")  # a typed false needs no line

    def step(self, state: LoopState) -> StepResult:
        if self.way is None:
            return self._probe(state)
        if self.graph is None:
            return self._compiled_step(state)
        try:
            result = self.graph(state)
        except GraphUnavailable as e:
            self.graph = None
            self._say(f"compile: the CUDA graph could not be built ({e}); the steps go on without it")
            return self._compiled_step(state)
        except Exception as e:  # noqa: BLE001 - the graph's warm-up steps are the first compiled ones
            if self.graph.captured or not self.way.inductor:
                raise
            self._drop_inductor(e)
            return train_step(self.s, state)
        if self.graph.captured and self.warming is not None:
            self._ready(state, f"graph captured in {self.graph.capture_seconds:.2f} s")
        return result

    def _probe(self, state: LoopState) -> StepResult:
        """An eager step of auto's timing; after PROBE_STEPS of them (the first untimed) the choice is made."""
        result = train_step(self.s, state)
        if self.timing is None:
            self.timing = (state.step, self._now())
        elif state.step - self.timing[0] >= PROBE_STEPS:
            per_step = (self._now() - self.timing[1]) / (state.step - self.timing[0])
            s = self.s
            inductor_ok = not (s.device.type == "cuda" and s.dtype == torch.bfloat16 and not has_native_bf16(s.device))
            way, why = measured_way(s.device, self._left_seconds(state, per_step), self.blocker, inductor_ok)
            if self.s.dist.enabled:  # every rank compiles, or none
                way = Way(inductor=distributed.any_rank(way.inductor, self.s.dist, self.s.device))
            self._adopt(way, why)
        return result

    def _left_seconds(self, state: LoopState, per_step: float) -> float:
        s = self.s
        by_steps = (s.max_steps - state.step) * per_step if s.max_steps is not None else math.inf
        by_clock = s.job.train.max_seconds - state.elapsed() if s.job.train.max_seconds else math.inf
        return max(0.0, min(by_steps, by_clock))

    def _adopt(self, way: Way, why: str, said: bool = False) -> None:
        s = self.s
        self.way = way
        if not said and worth_a_line(s.device, s.dtype, way):
            self._say(f"compile: {way.name} ({why})")
        if way == EAGER:
            return
        self.warming = time.perf_counter()
        if way.inductor:
            s.model = torch.compile(s.model)
        if way.graph:
            backend = self.graph_backend(s) if self.graph_backend else CudaGraph(s.device)
            self.graph = GraphStep(s, backend)

    def _compiled_step(self, state: LoopState) -> StepResult:
        if self.warming is None or not self.way.inductor:
            return train_step(self.s, state)
        try:  # the first compiled step compiles: a failure there leaves the step to be run eagerly
            result = train_step(self.s, state)
        except Exception as e:  # noqa: BLE001 - whatever inductor raises, the run goes on eagerly
            self._drop_inductor(e)
            self.warming = None
            return train_step(self.s, state)
        self._ready(state, f"compiled kernels cached in {inductor_cache()}")
        return result

    def _drop_inductor(self, e: Exception) -> None:
        """Inductor failed on its first step: the raw model (under DDP, its wrapper) runs that step again."""
        self.s.model = getattr(self.s.model, "_orig_mod", self.s.model)
        self.s.optimizer.zero_grad(set_to_none=True)
        self.way = Way(graph=self.way.graph)
        self._say(f"compile: inductor failed ({type(e).__name__}: {' '.join(str(e).split())[:160]}); the steps go "
                  "on without it")

    def _ready(self, state: LoopState, detail: str) -> None:
        self._now()  # the warm-up's last kernels have finished
        self._say(f"compile: warm-up took {time.perf_counter() - self.warming:.1f} s, ready at step {state.step} "
                  f"({detail})")
        self.warming = None

    def _now(self) -> float:
        if self.s.device.type == "cuda":
            torch.cuda.synchronize(self.s.device)
        return time.perf_counter()

    def _say(self, line: str) -> None:
        if self.s.dist.is_main:
            tqdm.write(line)
