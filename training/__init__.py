"""Training: `train()` (training/trainer.py) runs a `Session` (training/state.py, built by training/session.py) step by
step (training/step.py), validates and saves (training/checkpoints.py) until its `stop_cause` ends the run.

The parts, one level down: runner/ (how each step runs: eager, compiled, one CUDA graph), settings/ (the typed config
and everything resolved or refused at start), guards/ (signals, divergence, memory), optim/ (the optimizer family,
the schedule, weight averaging) and reporting/ (the progress bar, TensorBoard, the closing sample, what a run says at
its start and end).
"""
