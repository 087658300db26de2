"""What every entry script runs through: one-line errors and Ctrl-C (`entry`), `--help` built from the configs
(`help_text`), the crash report behind an unexpected error (`crash_report`), and the rewriting of command-line
overrides before Hydra sees them (`overrides`: Hangul quoting, `~` in paths). Beside them, what only `train.py` needs
around Hydra: run-folder names (`hydra_setup`), one training per folder (`run_lock`) and the folder's record put
back when a start saved nothing (`run_record`). It imports nothing of the project but `common`."""
