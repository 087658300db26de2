"""The training loop and what it needs: devices, schedules, checkpoints, logging, DDP."""
