"""What every entry script runs through: one-line errors and Ctrl-C (`entry`), `--help` built from the configs
(`help_text`), the crash report behind an unexpected error (`crash_report`), and the rewriting of command-line
overrides before Hydra sees them (`overrides`: Hangul quoting, `~` in paths). It imports nothing of the project
but `common`."""
