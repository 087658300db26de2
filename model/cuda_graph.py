"""A function of static buffers captured once as a CUDA graph and replayed, launching a small model's many short
kernels at once: the decode step (model/static_decode.py) and the whole training step (training/runner/graph.py).

Design choices:
- PyTorch's recipe: warm-ups on a side stream (kept by `CudaGraph`, so training runs its real steps there), then one
  capture. The function touches only tensors that outlive the graph; the caller undoes what warm-ups wrote.
- The graph is bound to one generator (`register_generator_state`), advanced by every replay as eager calls would.
  Autocast's weight cache is off while capturing (it would be freed under the graph).
- `capture_error_mode="thread_local"` (the playground captures while other threads work); one capture at a time.
- A failed capture is recovered from (`_recover`) and said in one line (`captured`, or training's own); the step
  then runs eagerly.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator

import torch

WARMUP_RUNS = 3
_CAPTURING = threading.Lock()  # one capture (with its warm-ups and its recovery) at a time

Step = Callable[[], None]
Capture = Callable[[Step, "torch.Generator | None"], Step]


class CudaGraph:
    """One CUDA graph with a side stream of its own: warm-ups (`side`), `capture`, `replay`."""

    def __init__(self, device: torch.device | None = None):
        self.stream = torch.cuda.Stream(device)
        self.graph = torch.cuda.CUDAGraph()
        self.replay = self.graph.replay

    @contextlib.contextmanager
    def side(self) -> Iterator[None]:
        """Work on the graph's stream, after what the caller's stream queued and before what it queues next."""
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            yield
        torch.cuda.current_stream().wait_stream(self.stream)

    def capture(self, fn: Step, generator: torch.Generator | None = None, warmups: int = 0) -> None:
        """`fn` run `warmups` times on the side stream, then recorded. On failure the device is recovered (back on
        the caller's stream, no generator left waiting for the capture's end) and the error raised."""
        caller = torch.cuda.current_stream()
        autocasting = torch.is_autocast_enabled("cuda")
        with (
            _CAPTURING,
            torch.autocast("cuda", dtype=torch.get_autocast_dtype("cuda"), enabled=autocasting, cache_enabled=False),
        ):
            try:
                with self.side():
                    for _ in range(warmups):
                        fn()
                if generator is not None:
                    self.graph.register_generator_state(generator)
                with torch.cuda.graph(self.graph, stream=self.stream, capture_error_mode="thread_local"):
                    fn()
            except BaseException:
                _recover(caller)
                raise


def capture_cuda_graph(fn: Step, generator: torch.Generator | None) -> Step:
    """`fn` warmed up on a side stream, then captured; returns the graph's replay. `generator`: the one
    generator `fn` draws from (None: only the default CUDA generator, which every graph registers itself)."""
    if generator is not None and generator.device.type != "cuda":  # a graph of CPU work would replay nothing
        raise RuntimeError(f"the step runs on {generator.device.type}, not on a CUDA device")
    graph = CudaGraph()
    graph.capture(fn, generator, WARMUP_RUNS)
    return graph.replay  # the bound method keeps the graph alive


def captured(fn: Step, what: str, generator: torch.Generator | None, capture: Capture | None = None) -> Step | None:
    """`capture(fn, generator)`'s replay, its cost said in one line on stderr; where capture fails, None after one
    line that says why. `capture` defaults to `capture_cuda_graph` (tests pass a stand-in)."""
    start = time.perf_counter()
    try:
        replay = (capture or capture_cuda_graph)(fn, generator)
    except Exception as e:  # noqa: BLE001 - any failure to capture leaves the step eager, said once
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        print(
            f"{what}: not captured as a CUDA graph ({type(e).__name__}: {reason}); running it eagerly",
            file=sys.stderr,
            flush=True,
        )
        return None
    print(
        f"{what}: captured as a CUDA graph in {1000 * (time.perf_counter() - start):.0f} ms, replayed for each token",
        file=sys.stderr,
        flush=True,
    )
    return replay


def _recover(stream: torch.cuda.Stream) -> None:
    """After a failed capture: back on the caller's stream (a capture that failed may leave its own current),
    with the work already queued finished."""
    try:
        torch.cuda.set_stream(stream)
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - an error left by the failed capture is reported by the next kernel
        pass
    # A capture that ended in an error can leave the default generator waiting for its end (torch 2.11: "Offset
    # increment outside graph capture encountered unexpectedly" at the next random draw); an empty capture that ends
    # cleanly releases it. A generator of the caller's own is replaced by the caller (model/static_decode.py).
    with contextlib.suppress(Exception), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "The CUDA Graph is empty": it is meant to be
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            pass
