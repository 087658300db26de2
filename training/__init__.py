"""Training: `train()` (training/trainer.py) runs a `Session` (training/session.py) step by step (training/step.py),
validates and saves (training/checkpoints.py) until a limit, early stopping or a signal ends the run.

The parts, one level down: runner/ (how each step runs: eager, compiled, one CUDA graph), settings/ (the typed config
and everything resolved or refused at start), guards/ (signals, divergence, memory), optim/ (the optimizer family,
the schedule, weight averaging) and reporting/ (the progress bar, TensorBoard, the closing sample).
"""
