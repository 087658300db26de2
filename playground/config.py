"""Typed configuration of `serve.py`: Hydra's schema for `configs/serve.yaml`.

Design choices:
- The limits (`max_new_tokens_limit`, `max_prompt_chars`) are the server's: no request keeps a model busy for hours."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from hydra.core.config_store import ConfigStore

from common import config_checks as checks
from common.errors import ConfigError
from inference.config import WEIGHTS


@dataclass
class ServeConfig:
    ckpt: str | None = None  # run folder or checkpoint file shown first; None = the newest run under runs_dir
    runs_dir: str = "runs"  # the page and the API may open runs under this folder only
    host: str = "127.0.0.1"  # loopback only; 0.0.0.0 opens the playground to the network
    port: int = 8000  # 0 = any free port
    max_new_tokens_limit: int = 2000
    max_prompt_chars: int = 4000
    cache_size: int = 4  # loaded runs kept in memory; the least recently used is dropped first
    device: str = "auto"
    weights: str | None = None  # null (each run's average where it kept one, else raw) | averaged | raw
    allowed_hosts: list[str] = field(default_factory=list)  # Host names answered besides the loopback ones
    max_body_bytes: int = 65536  # larger request bodies are refused (413) before they are read
    header_timeout_s: float = 10.0  # a connection must send a whole request head within this
    body_timeout_s: float = 10.0  # ... and the request's body within this
    keep_alive_s: float = 5.0  # an idle connection is closed after this
    send_timeout_s: float = 30.0  # a client that reads nothing of its answer for this long is dropped
    max_connections: int = 1000  # open connections; a request on one beyond them gets 503
    max_generations: int = 8  # samples and attention requests in progress, all runs together (503 beyond)
    max_generations_per_run: int = 4  # ... on one run

    def __post_init__(self) -> None:
        if not str(self.runs_dir).strip():
            raise ConfigError("runs_dir is empty: give the folder that holds your runs (default: runs)")
        if not str(self.host).strip():
            raise ConfigError("host is empty: use 127.0.0.1 (this machine only) or 0.0.0.0 (the network)")
        checks.positive_int("port", self.port, minimum=0)
        if self.port > 65535:
            raise ConfigError(
                f"port={checks.shown_value(self.port)} is invalid: it must be in [0, 65535] (0 = any free port)"
            )
        checks.device_name("device", self.device)
        checks.one_of("weights", self.weights, WEIGHTS, optional=True)
        for key in (f.name for f in fields(self) if f.type == "int" and f.name != "port"):  # the limits
            checks.positive_int(key, getattr(self, key))
        for key in (f.name for f in fields(self) if f.type == "float"):  # the timeouts
            checks.number_in(key, getattr(self, key), 0, 3600, low_open=True)
        if any(not isinstance(h, str) or not h.strip() for h in self.allowed_hosts):
            raise ConfigError(
                f"allowed_hosts={list(self.allowed_hosts)} has an empty name: list host names, "
                "e.g. 'allowed_hosts=[mybox.lan,192.168.1.20]'"
            )


def register_configs() -> None:
    ConfigStore.instance().store(name="serve_schema", node=ServeConfig)
