"""Download a public Korean corpus and turn it into training text (docs/en/corpora.md)."""
