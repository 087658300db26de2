"""What every entry script runs through (one-line errors, Ctrl-C, `--help`, overrides made ready for Hydra) and what
only `train.py` needs around Hydra (run folders, their lock and record). It imports nothing of the project but
`common`."""
