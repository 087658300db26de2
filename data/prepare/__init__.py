"""Download a public Korean corpus into a local cache and turn it into training text.

    python -m data.prepare koconovel [--files] [--cache-dir DIR] [--base-url URL|FOLDER] [--force]
                                     [--min-speed KB_PER_S] [--max-file-mb MB]
    python -m data.prepare nsmc [--cache-dir DIR] [--base-url URL|FOLDER] [--force]
    python -m data.prepare --list

Prints the `data.path=...` override to train on the prepared text (on stdout; progress goes to stderr): one
file, or with `--files` a folder holding one file per document (KoCoNovel's novels).
"""

from data.download import download
from data.prepare.catalog import KOCONOVEL, NSMC, REGISTRY, CorpusSource, RemoteFile
from data.prepare.command import main
from data.prepare.fetching import BASE_URL_ENV, default_cache_dir, prepare

__all__ = ["BASE_URL_ENV", "KOCONOVEL", "NSMC", "REGISTRY", "CorpusSource", "RemoteFile", "default_cache_dir",
           "download", "main", "prepare"]
