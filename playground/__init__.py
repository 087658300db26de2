"""The playground: a page in the browser to sample from trained runs, character by character (`python serve.py`).

Design choices common to all: nothing here reimplements the model or the sampler, so the page shows what
`generate.py` would print; every blocking call runs off the event loop; a run name never leaves `runs_dir`."""
