"""A function of static buffers captured once as a CUDA graph and replayed, or left eager where capture fails.

Design choices:
- One call of a small model's decode step is ~60 kernels of a few microseconds each: launched one by one from
  Python, the GPU waits on the CPU. A CUDA graph replays all of them from one launch.
- PyTorch's recipe (torch.cuda.graph's documentation): the function runs a few times on a side stream first (so
  lazy initialisations, cuBLAS workspaces and the allocator's blocks exist before capture), then once under
  capture. It must read and write only tensors that outlive the graph; the caller undoes what the warm-up runs
  wrote (model/static_decode.py).
- Random draws: the graph is bound to one generator (`register_generator_state`) whose offset every replay
  advances as the eager calls would, so a replay draws the numbers the function would have drawn eagerly.
- Autocast's cache of cast weights is off while capturing: a cast it kept would be freed when the caller's
  autocast ends, and the graph would go on reading freed memory.
- `capture_error_mode="thread_local"`: the playground captures in one worker thread while others may be
  launching their own work; only this thread's unsafe calls can spoil the capture. One capture at a time.
- Whatever goes wrong while capturing, the step runs eagerly after one line on stderr that says why.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import TextIO

import torch

WARMUP_RUNS = 3
_CAPTURING = threading.Lock()  # torch.cuda.graph's capture stream is shared: one capture at a time

Step = Callable[[], None]
Capture = Callable[[Step, "torch.Generator | None"], Step]


def capture_cuda_graph(fn: Step, generator: torch.Generator | None) -> Step:
    """`fn` warmed up on a side stream, then captured; returns the graph's replay. `generator`: the one
    generator `fn` draws from (None: only the default CUDA generator, which every graph registers itself)."""
    if generator is not None and generator.device.type != "cuda":  # a graph of CPU work would replay nothing
        raise RuntimeError(f"the step runs on {generator.device.type}, not on a CUDA device")
    autocasting = torch.is_autocast_enabled("cuda")
    with _CAPTURING, torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), enabled=autocasting,
                                     cache_enabled=False):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        if generator is not None:
            graph.register_generator_state(generator)
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            fn()
    return graph.replay  # the bound method keeps the graph alive


def captured(fn: Step, what: str, generator: torch.Generator | None, capture: Capture | None = None,
             out: TextIO | None = None) -> Step:
    """`capture(fn, generator)`'s replay, its cost said in one line on `out` (stderr); where capture fails, `fn`
    itself after one line that says why. `capture` defaults to `capture_cuda_graph` (tests pass a stand-in)."""
    out = out or sys.stderr
    stream = torch.cuda.current_stream() if torch.cuda.is_available() else None
    start = time.perf_counter()
    try:
        replay = (capture or capture_cuda_graph)(fn, generator)
    except Exception as e:  # noqa: BLE001 - any failure to capture leaves the step eager, said once
        _recover(stream)
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        print(f"{what}: not captured as a CUDA graph ({type(e).__name__}: {reason}); running it eagerly",
              file=out, flush=True)
        return fn
    print(f"{what}: captured as a CUDA graph in {1000 * (time.perf_counter() - start):.0f} ms, replayed for "
          "each token", file=out, flush=True)
    return replay


def _recover(stream: torch.cuda.Stream | None) -> None:
    """After a failed capture: back on the caller's stream (a capture that failed may leave its own current),
    with the work already queued finished."""
    if stream is None:
        return
    try:
        torch.cuda.set_stream(stream)
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - an error left by the failed capture is reported by the next kernel
        pass
    # A capture that ended in an error can leave the default generator waiting for its end (torch 2.11: "Offset
    # increment outside graph capture encountered unexpectedly" at the next random draw); an empty capture that ends
    # cleanly releases it. The step's own generator is replaced by the caller (model/static_decode.py).
    with contextlib.suppress(Exception), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "The CUDA Graph is empty": it is meant to be
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            pass
