"""Download a public Korean corpus and turn it into training text (docs/en/corpora.md)."""

from data.download import download
from data.prepare.catalog import KOCONOVEL, NSMC, REGISTRY, CorpusSource, RemoteFile
from data.prepare.command import main
from data.prepare.fetching import BASE_URL_ENV, default_cache_dir, prepare

__all__ = [
    "BASE_URL_ENV",
    "KOCONOVEL",
    "NSMC",
    "REGISTRY",
    "CorpusSource",
    "RemoteFile",
    "default_cache_dir",
    "download",
    "main",
    "prepare",
]
