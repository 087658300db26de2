"""What a run shows while it trains: `progress` (the bar, counting toward whichever limit stops the run),
`tensorboard` (the same tags for every run, samples, attention maps, HParams) and `sample` (the closing sample)."""
