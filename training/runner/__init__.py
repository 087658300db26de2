"""How a training step runs, as `train.compile` chose: `plan` (false | true | auto, and what auto decides), `steps`
(`StepRunner`: the loop's steps run that way, with its warm-up and fallbacks) and `graph` (the whole step captured
once as a CUDA graph and replayed)."""
