"""The optimizer family: `factory` (which parameters decay, which take Muon; the learning rates the loop sets),
`muon` (Muon and AdamW as one optimizer), `schedule` (warmup, then cosine decay), `averaging` (EMA or SWA of the
weights kept beside them) and `layout` (a saved optimizer state regrouped into the model's attention layout)."""
