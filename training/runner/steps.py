"""The loop's steps, run the way `train.compile` chose (training/runner/plan.py): eager, compiled, as a CUDA graph.

Design choices:
- `auto` times the first, eager steps (real steps of the run), then chooses; `true` and `false` choose at once.
- Inductor compiles on a pass of its own before the first compiled step (the step's batch put back, no update, the
  random streams as they were), so a signal ends it at once and the loop saves the step reached.
- The warm-up counts against `train.max_seconds`. Under auto the first compiled steps are timed against the eager
  ones: under `KEEP` times faster, the run goes back to eager; the numbers are recorded for the next run.
- What cannot be built is said in one line and the steps go on without it. Evaluation uses the raw model eagerly.
"""

from __future__ import annotations

import functools
import math
import statistics
import time

import torch
from torch import Tensor

from common.device import has_native_bf16
from model.cuda_graph import CudaGraph
from training import distributed
from training.guards.signals import stop_at_once
from training.runner import plan
from training.runner.graph import GraphStep, GraphUnavailable, release
from training.settings import inductor_cache_folder
from training.state import LoopState, Session
from training.step import StepRun, eager_update, forward_backward


class StepRunner:
    """Chooses, for each step of the loop, how `train_step` runs it (`step_fn`): eager, compiled, or the CUDA graph."""

    def __init__(self, s: Session, graph_backend=None, way: plan.Way | None = None):
        """`way`: a way chosen by the caller (the benchmarks), instead of train.compile's."""
        t = s.job.train
        self.s = s
        self.model = s.model  # what the steps run: the session's model, compiled here where the way says
        self.blocker = plan.graph_blocker(s.device, s.dist.enabled, bool(t.mtp_weights))
        self.graph_backend = graph_backend  # session -> backend; None: a real CUDA graph (tests pass a stand-in)
        self.way: plan.Way | None = None
        self.graph: GraphStep | None = None
        self.probed = 0  # auto's eager steps so far
        self.eager_times: list[float] = []  # seconds of auto's timed eager steps
        self.compiled_times: list[float] | None = None  # seconds of the compiled steps timed against them
        self.warming: float | None = None  # when the chosen way started to warm up
        self.compiled = False  # inductor has compiled the step (or failed to)
        self.record: dict = {}  # the chosen way's key and warm-up, recorded for the next run
        self.cache_counts = (0, 0)  # inductor's cache (hits, misses) when the warm-up began
        self.unrecorded = False  # the records file could not be written (said once)
        self.setting = plan.compile_setting(t.compile)
        key = self._key(plan.Way(inductor=True, graph=self.blocker is None))
        measured = bool(plan.read_all().get(key, {}).keys() - {"cache"})  # this machine's record of this run's compile
        decided = plan.fixed_way(self.setting, s.device, s.dtype, self.blocker, measured)
        fixed = (way, "chosen by caller") if way else decided
        if fixed is not None:
            self._adopt(*fixed, said=self.setting == "false")  # a typed false needs no line

    def step_fn(self, state: LoopState) -> StepRun:
        """How this step's forward, backward and update run, for `train_step`: eagerly while auto times them, then
        compiled or as one CUDA graph, as chosen."""
        return functools.partial(self._run, state)

    def _run(self, state: LoopState, mtp: list[float]) -> tuple[Tensor, Tensor]:
        if self.way is None:
            return self._probe(state, mtp)
        if self.warming is not None and self.way.inductor and not self.compiled:
            self._compile(mtp)
        timed = self.compiled_times is not None and self.warming is None  # auto compares compiled and eager
        started = self._now() if timed else 0.0
        out = self._compiled(state, mtp) if self.graph is None else self._graphed(state, mtp)
        if timed and self.compiled_times is not None:
            self.compiled_times.append(self._now() - started)
            if len(self.compiled_times) >= plan.COMPARE_STEPS:
                self._compare()
        return out

    def _probe(self, state: LoopState, mtp: list[float]) -> tuple[Tensor, Tensor]:
        """An eager step of auto's timing; after PROBE_STEPS of them (the first, which allocates, untimed) the choice
        is made."""
        started = self._now()
        out = eager_update(self.s, self.model, mtp)
        if self.probed:
            self.eager_times.append(self._now() - started)
        self.probed += 1
        if len(self.eager_times) >= plan.PROBE_STEPS:
            self._decide(state, statistics.median(self.eager_times))
        return out

    def _graphed(self, state: LoopState, mtp: list[float]) -> tuple[Tensor, Tensor]:
        try:
            out = self.graph(mtp)
        except GraphUnavailable as e:
            self.graph = None
            self.s.say(f"compile: the CUDA graph could not be built ({e}); the steps go on without it")
            return self._compiled(state, mtp)
        except Exception as e:  # noqa: BLE001 - the graph's warm-up steps are the first compiled ones
            if self.graph.captured or not self.way.inductor:
                raise
            self._drop_inductor(e)
            return eager_update(self.s, self.model, mtp)
        if self.graph.captured and self.warming is not None:
            self._ready(state, f"graph captured in {self.graph.capture_seconds:.2f} s")
        return out

    def _decide(self, state: LoopState, per_step: float) -> None:
        s = self.s
        left = self._left_seconds(state, per_step)
        if state.early.acts(state.step, state.best_val_loss, s.max_steps, s.job.train.eval_interval):
            left /= 2  # early stopping may end the run sooner than its limit
        inductor_ok = not (s.device.type == "cuda" and s.dtype == torch.bfloat16 and not has_native_bf16(s.device))
        key = self._key(plan.Way(inductor=True, graph=self.blocker is None))
        costs = plan.measured_costs(key, s.device, s.dtype, inductor_cache_folder())
        way, why = plan.measured_way(s.device, left, left / per_step, self.blocker, costs, inductor_ok)
        if s.dist.enabled:  # every rank compiles, or none
            way = plan.Way(inductor=distributed.any_rank(way.inductor, s.dist, s.device))
        self._adopt(way, why, measured=costs.source != plan.prior_costs(s.device, s.dtype).source)

    def _left_seconds(self, state: LoopState, per_step: float) -> float:
        s = self.s
        by_steps = (s.max_steps - state.step) * per_step if s.max_steps is not None else math.inf
        by_clock = s.job.train.max_seconds - state.elapsed() if s.job.train.max_seconds else math.inf
        return max(0.0, min(by_steps, by_clock))

    def _key(self, way: plan.Way) -> str:
        return plan.record_key(self.s.device, self.s.dtype, way, self.s.raw_model.config, self.s.job.train.batch_size)

    def _adopt(self, way: plan.Way, why: str, said: bool = False, measured: bool = False) -> None:
        s = self.s
        self.way = way
        if not said and plan.worth_a_line(s.device, s.dtype, way, measured):
            self.s.say(f"compile: {way.name} ({why})")
        if way == plan.EAGER:
            return
        self.warming = time.perf_counter()
        self.record = {"key": self._key(way), "cache": inductor_cache_folder()}
        # the warm-up is warm where inductor's cache serves every graph
        self.cache_counts = plan.inductor_cache_counts()
        if way.inductor:
            self.model = torch.compile(s.model)
        if way.graph:
            backend = self.graph_backend(s) if self.graph_backend else CudaGraph(s.device)
            self.graph = GraphStep(s, backend, self.model)

    def _compile(self, mtp: list[float]) -> None:
        """Inductor compiles the model's forward and backward on this step's own batch (drawn again by the step),
        with no update and the random streams as they were: a signal ends the compile at once (the loop then saves
        the step reached, which nothing here has moved), and a model inductor cannot build runs eagerly."""
        s, self.compiled = self.s, True
        try:
            with torch.random.fork_rng(devices=[s.device] if s.device.type == "cuda" else []), stop_at_once():
                if self.graph is not None:
                    self.graph.compile_pass()
                else:
                    try:
                        forward_backward(s, self.model, s.sampler.peek(), mtp)
                    finally:
                        s.optimizer.zero_grad(set_to_none=True)
        except Exception as e:  # noqa: BLE001 - whatever inductor raises, the run goes on eagerly
            self._drop_inductor(e)
            if self.graph is None:
                self.warming = None

    def _compiled(self, state: LoopState, mtp: list[float]) -> tuple[Tensor, Tensor]:
        if self.warming is None or not self.way.inductor:
            return eager_update(self.s, self.model, mtp)
        try:  # the first compiled step may still compile more: a failure there leaves the step to be run eagerly
            out = eager_update(self.s, self.model, mtp)
        except Exception as e:  # noqa: BLE001 - whatever inductor raises, the run goes on eagerly
            self._drop_inductor(e)
            self.warming = None
            return eager_update(self.s, self.model, mtp)
        self._ready(state, f"compiled kernels cached in {inductor_cache_folder()}")
        return out

    def _drop_inductor(self, e: Exception) -> None:
        """Inductor failed on its first steps: the session's model (under DDP, its wrapper) runs them again."""
        self.model = self.s.model
        if self.graph is not None:
            self.graph.model = self.model
        self.s.optimizer.zero_grad(set_to_none=True)
        self.way = plan.Way(graph=self.way.graph)
        self.s.say(
            f"compile: inductor failed ({type(e).__name__}: {' '.join(str(e).split())[:160]}); the steps go "
            "on without it"
        )

    def _ready(self, state: LoopState, detail: str) -> None:
        self._now()  # the warm-up's last kernels have finished
        seconds = time.perf_counter() - self.warming
        self.s.say(f"compile: warm-up took {seconds:.1f} s, ready at step {state.step + 1} ({detail})")
        self.warming = None
        if self.way.inductor:
            (hits, misses), (hits_before, misses_before) = plan.inductor_cache_counts(), self.cache_counts
            warm = hits > hits_before and misses == misses_before
            self.record.update(warmup_s=round(seconds, 2), warm=warm)
            self.compiled_times = [] if self.eager_times else None  # compared where auto timed eager steps
            if self.compiled_times is None:
                self._write_record()

    def _compare(self) -> None:
        """Keep the compiled steps where they are `KEEP` times faster than the eager ones, else go back to eager."""
        s = self.s
        eager, compiled = (
            distributed.agreed_max(statistics.median(times), s.dist, s.device)
            for times in (self.eager_times, self.compiled_times)
        )
        self.compiled_times = None
        speedup = eager / max(compiled, 1e-12)
        self.record.update(
            speedup=round(speedup, 3), eager_ms=round(1000 * eager, 2), compiled_ms=round(1000 * compiled, 2)
        )
        recorded = self._write_record()
        both = f"a compiled step takes {1000 * compiled:.1f} ms against {1000 * eager:.1f} ms eager ({speedup:.2f}x)"
        if speedup >= plan.KEEP:
            self.s.say(f"compile: kept: {both}")
            return
        noted = "; recorded for the next run on this machine" if recorded else ""
        self.s.say(f"compile: back to eager: {both}, under the {plan.KEEP:g}x that pays for compiling{noted}")
        if self.graph is not None:
            release(s)
        self.model, self.graph, self.way = s.model, None, plan.EAGER

    def _write_record(self) -> bool:
        """Keep the measurements for the next run on this machine; a file that cannot be written is said once, naming
        its folder, and the run goes on. True once written."""
        if not (self.s.dist.is_main and self.record.get("key")):
            return False
        failed = plan.write_record(self.record["key"], **{k: v for k, v in self.record.items() if k != "key"})
        if failed and not self.unrecorded:
            self.unrecorded = True
            self.s.say(
                f"compile: could not record the measurements in {plan.records_path().parent} ({failed}); the next "
                "run on this machine measures again"
            )
        return failed is None

    def _now(self) -> float:
        if self.s.device.type == "cuda":
            torch.cuda.synchronize(self.s.device)
        return time.perf_counter()
