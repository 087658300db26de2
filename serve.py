"""The playground in the browser.  python serve.py [ckpt=<run dir>] [runs_dir=runs] [port=8000] ...

Design choices:
- The socket is bound before uvicorn starts: a port in use is one `error:` line, and `port=0` prints the OS's choice.
- The default run loads before the URL is printed: a broken checkpoint fails at once, and the first sample is quick."""

from cli.entry import hydra_script

import socket
import sys

from playground.config import ServeConfig, register_configs

EXAMPLES = (
    "python serve.py                                         # the newest run under runs/",
    "python serve.py ckpt=runs/2026-11-22_17-14-32_model-tiny port=8080",
    "python serve.py runs_dir=runs/2026-11-22_17-34-43_width  # the runs of one sweep",
)


def _bind(host: str, port: int) -> socket.socket:
    from common.errors import UserError

    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as e:
        raise UserError(f"host={host} cannot be resolved ({e.strerror}); use 127.0.0.1 or 0.0.0.0") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)  # connections made as soon as the URL is printed wait in the backlog for uvicorn
    except OSError as e:
        sock.close()
        raise UserError(
            f"cannot listen on {host}:{port} ({e.strerror}); pick another port, e.g. "
            f"python serve.py port={port + 1 if port else 8001}"
        ) from None
    return sock


def _url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host == "::" else host
    return f"http://[{shown}]:{port}/" if ":" in shown and not shown.startswith("[") else f"http://{shown}:{port}/"


def _raise_file_limit(needed: int) -> None:
    """Each connection is a file descriptor: make room for max_connections (the soft limit is often 1024)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        if target < needed:
            print(
                f"warning: this process may open {target} files (ulimit -n); lower max_connections "
                f"to about {target - 64}",
                file=sys.stderr,
            )


def _run(config: ServeConfig) -> None:
    import uvicorn

    from playground.app import create_app
    from playground.guard import allowed_host_names, is_loopback, server_config

    names = allowed_host_names(config.host, list(config.allowed_hosts))  # refuses a network bind without names
    app = create_app(config, allowed_hosts=names)
    pg = app.state.playground
    default = pg.registry.default_path()
    if default is None:
        print(
            f"warning: no runs under {config.runs_dir}/ yet: train one (python train.py), then reload the page",
            file=sys.stderr,
        )
    else:
        loaded = pg.cache.get(pg.registry.name_of(default), pg.registry.file(default))
        print(f"run: {loaded.name} (step {loaded.run.checkpoint.step}) on {pg.cache.device}; {loaded.run.line()}")
    sock = _bind(config.host, config.port)
    port = sock.getsockname()[1]
    _raise_file_limit(config.max_connections + 64)
    print(f"kochar-gpt playground: open {_url(config.host, port)}  (Ctrl-C stops it)", flush=True)
    if not is_loopback(config.host):
        shown = "any name" if names is None else ", ".join(sorted(names))
        print(
            f"warning: host={config.host}: other machines can reach this server; it answers requests for "
            f"{shown} (allowed_hosts)",
            file=sys.stderr,
        )
    uvicorn.Server(server_config(app, config.header_timeout_s, config.keep_alive_s, config.max_connections)).run(
        sockets=[sock]
    )


if __name__ == "__main__":
    register_configs()
    hydra_script(
        "serve",
        ServeConfig,
        _run,
        "serve.py: the playground in the browser (stream samples, probabilities, attention).",
        EXAMPLES,
    )
