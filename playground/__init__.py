"""The playground: a page in the browser to sample from trained runs, character by character.

`python serve.py` starts it (see configs/serve.yaml). Modules:
- `config`: the typed `ServeConfig` (Hydra schema `serve_schema`).
- `runs`: which runs may be opened, by name, and their summaries (`GET /api/runs`).
- `cache`: loaded runs, least recently used first out, one model forward at a time per run.
- `sampling`: one sample as a stream of character events with their probabilities (`POST /api/generate`).
- `attention`: the attention weights behind one position (`POST /api/attention`).
- `schemas`, `app`: request checking and the FastAPI routes; `static/`: the page.

Design choices common to all: nothing here reimplements the model or the sampler, so the page shows what
`generate.py` would print; every blocking call runs off the event loop; a run name never leaves `runs_dir`.
"""
