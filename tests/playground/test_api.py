"""The playground's HTTP API (serve.py) through Starlette's test client, and raw ASGI calls for disconnects
(test_browser.py drives a real server). Checkpoints are built directly: untrained models, no training."""

import asyncio
import io
import json
import math
import time
import warnings

import httpx
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from common.errors import ConfigError
from inference.checkpoint import Checkpoint, TrainingState, save_checkpoint
from inference.config import GenerateConfig
from inference.generation import stream_samples
from model import AttentionLanguageModel
from model import sampling as sampler
from model.attention_maps import attention_maps
from playground import app as app_module
from playground import runs as playground_runs
from playground.app import create_app
from playground.config import ServeConfig, register_configs
from tests.conftest import ROOT
from tokenizer import KoreanCharTokenizer, KoreanJamoTokenizer

with warnings.catch_warnings():  # Starlette would rather have httpx2; httpx is what the project installs
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TEXT = "옛날에 한 마을에 착한 나무꾼이 살았다. 그는 날마다 산에 올라 나무를 했다.\n"  # written for this test
CPU = torch.device("cpu")


def make_run(folder, seed=0, tokenizer=KoreanCharTokenizer, val_loss=None):
    tok = tokenizer.from_text(TEXT)
    torch.manual_seed(seed)
    m = AttentionLanguageModel(
        vocab_size=tok.vocab_size, context_length=32, embedding_size=32, head_size=32, num_heads=4, num_blocks=2
    )
    training = None if val_loss is None else TrainingState(300, {}, {}, val_loss, val_loss, 1.0, {}, {})
    folder.mkdir(parents=True, exist_ok=True)
    save_checkpoint(Checkpoint(m.config, m.state_dict(), tok.to_dict(), training=training), folder / "ckpt.pt")
    return m.eval(), tok


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    models = {
        "a": make_run(root / "a", 0, val_loss=2.0),
        "sweep/1": make_run(root / "sweep" / "1", 1),
        "jamo": make_run(root / "jamo", 2, KoreanJamoTokenizer),
    }
    return root, models


def app_for(root, **kw):
    return create_app(ServeConfig(runs_dir=str(root), **kw), CPU)


@pytest.fixture
def client(runs):
    with TestClient(app_for(runs[0])) as c:
        yield c


def parse_sse(text: str) -> list[tuple[str, dict]]:
    blocks = [dict(line.split(": ", 1) for line in block.split("\n")) for block in text.strip().split("\n\n")]
    return [(fields["event"], json.loads(fields["data"])) for fields in blocks]


def expected(model, tok, prompt, n, seed, temperature=0.8, top_k=None, top_p=None) -> str:
    """What generate.py prints for these settings (without its final line break)."""
    c = GenerateConfig(prompt=prompt, max_new_tokens=n, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    return stream_samples(model, tok, c, CPU, out=io.StringIO())[0]


def test_runs_are_listed_with_their_summary(client):
    runs = {r["name"]: r for r in client.get("/api/runs").json()}
    assert set(runs) == {"a", "sweep/1", "jamo"}
    assert runs["a"]["val_bpc"] == pytest.approx(2.0 / math.log(2), abs=1e-3) and runs["a"]["step"] == 300
    assert runs["sweep/1"]["val_bpc"] is None and runs["sweep/1"]["recipe"] == "lecture"
    assert runs["jamo"]["tokenizer"] == "jamo" and sum(r["default"] for r in runs.values()) == 1


def test_page_is_served_and_needs_nothing_from_outside(client):
    page = client.get("/")
    assert page.status_code == 200 and "플레이그라운드" in page.text
    for name in ("app.js", "style.css"):
        body = client.get(f"/static/{name}")
        assert body.status_code == 200 and "http://" not in body.text and "https://" not in body.text
    assert "http://" not in page.text and "https://" not in page.text


@pytest.mark.parametrize("settings", [{}, {"temperature": 0}, {"top_k": 3, "temperature": 1.3}, {"top_p": 0.6}])
@pytest.mark.parametrize("run", ["a", "jamo"])
def test_same_seed_gives_the_text_of_generate_py(client, runs, settings, run):
    model, tok = runs[1][run]
    body = {"run": run, "prompt": "옛날에", "max_new_tokens": 40, "seed": 5, **settings}
    got = client.post("/api/generate", json={**body, "stream": False}).json()
    assert got["text"] == expected(model, tok, "옛날에", 40, 5, **settings)
    streamed = parse_sse(client.post("/api/generate", json=body).text)
    assert streamed[-1][0] == "done" and streamed[-1][1]["text"] == got["text"]
    chars = [e for kind, e in streamed if kind == "char"]
    assert chars == got["tokens"] and "".join(e["text"] for e in chars) == got["completion"]
    assert sum(e["n_tokens"] for e in chars) == got["new_tokens"] and all(len(e["text"]) == 1 for e in chars)
    assert 40 <= got["new_tokens"] <= (42 if run == "jamo" else 40)  # jamo: the syllable the limit cut is finished


@pytest.mark.parametrize(
    "temperature,top_k,top_p",
    [(1.0, None, None), (0.7, 5, None), (1.3, None, 0.8), (0.5, 20, 0.9), (1e-30, None, None)],
)
def test_reported_distribution_is_the_one_the_sampler_draws_from(monkeypatch, temperature, top_k, top_p):
    seen = []
    monkeypatch.setattr(sampler, "sample_from", lambda probs, generator=None: seen.append(probs) or probs[:, :1])
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 4
    drawing = sampler.Sampler(50, logits.device)
    drawing.set(temperature, top_k, top_p, None)
    drawing(logits, None)
    if seen:  # greedy draws nothing: the raw softmax is reported instead
        assert torch.allclose(seen[0], drawing.probs(logits))


def test_char_events_carry_probability_and_alternatives(client):
    body = {"run": "a", "prompt": "옛날에", "max_new_tokens": 30, "top_k": 4, "temperature": 1.0}
    events = [e for kind, e in parse_sse(client.post("/api/generate", json=body).text) if kind == "char"]
    assert len(events) == 30 and [e["pos"] for e in events] == list(range(3, 33))
    for e in events:
        assert len(e["text"]) == 1 and 0 < e["prob"] <= 1
        probs = [alt["prob"] for alt in e["top"]]
        assert len(probs) <= 3 and probs == sorted(probs, reverse=True)  # top_k=4: three others at most
        assert e["text"] not in [alt["text"] for alt in e["top"]] and e["prob"] + sum(probs) <= 1 + 1e-5
    greedy = client.post("/api/generate", json={**body, "temperature": 0, "top_k": None, "stream": False}).json()
    assert all(e["prob"] >= e["top"][0]["prob"] and len(e["top"]) == 5 for e in greedy["tokens"])
    got = client.post("/api/generate", json={"run": "a", "prompt": "", "max_new_tokens": 5, "stream": False}).json()
    assert got["context"] == "\n" and got["prompt_tokens"] == 1  # an empty prompt starts from a line break
    got = client.post("/api/generate", json={"prompt": "옛날에 🐯", "max_new_tokens": 3, "stream": False}).json()
    assert got["unknown_chars"] == ["🐯"]


@pytest.mark.parametrize(
    "body,field",
    [
        ({"temperature": -1}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 1e39}, "temperature"),  # finite, but not in the float32 the sampler computes in
        ({"top_k": 0}, "top_k"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_new_tokens": -1}, "max_new_tokens"),
        ({"max_new_tokens": "9"}, "max_new_tokens"),
        ({"max_new_tokens": 5001}, "max_new_tokens"),
        ({"prompt": "가" * 101}, "prompt"),
        ({"seed": -3}, "seed"),
        ({"stream": "yes"}, "stream"),
        ({"temprature": 1}, "temprature"),
        ({"prompt": 3}, "prompt"),
    ],
)
def test_bad_parameters_are_refused_naming_the_field(runs, body, field):
    with TestClient(app_for(runs[0], max_prompt_chars=100, max_new_tokens_limit=5000)) as c:
        r = c.post("/api/generate", json=body)
    assert r.status_code == 422 and r.json()["field"] == field and "\n" not in r.json()["error"]


def test_non_json_bodies_and_nan_are_refused(client):
    for content in (b"{oops", b"[1, 2]", b'{"temperature": NaN}', b'{"top_p": Infinity}'):
        r = client.post("/api/generate", content=content, headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["error"], content


def test_run_names_never_leave_runs_dir(runs, tmp_path):
    root = runs[0]
    make_run(tmp_path / "outside", 3)
    (root / "link").symlink_to(tmp_path / "outside")
    (root / "linked_file").mkdir()
    (root / "linked_file" / "ckpt.pt").symlink_to(tmp_path / "outside" / "ckpt.pt")
    with TestClient(app_for(root)) as c:
        assert {r["name"] for r in c.get("/api/runs").json()} == {"a", "sweep/1", "jamo"}
        for name in (
            "../outside",
            str(tmp_path / "outside"),
            "link",
            "linked_file",
            "a/../../outside",
            "a/..",
            "sweep/../a",
            "nope",
            "a\\..\\..",
            "@ckpt",
            "a/ckpt.pt",
        ):
            r = c.post("/api/generate", json={"run": name, "max_new_tokens": 1})
            assert r.status_code == 404 and r.json()["field"] == "run", name
            assert c.post("/api/attention", json={"run": name, "text": "옛날"}).status_code == 404


def test_ckpt_outside_runs_dir_is_the_default_run(runs, tmp_path):
    model, tok = make_run(tmp_path / "elsewhere", 4)
    with TestClient(create_app(ServeConfig(runs_dir=str(runs[0]), ckpt=str(tmp_path / "elsewhere")), CPU)) as c:
        listed = c.get("/api/runs").json()
        assert listed[0]["name"] == "@ckpt" and listed[0]["default"]
        got = c.post("/api/generate", json={"prompt": "옛날", "max_new_tokens": 8, "stream": False}).json()
        assert got["run"] == "@ckpt" and got["text"] == expected(model, tok, "옛날", 8, 1337)


def test_unreadable_checkpoint_is_listed_and_refused_with_400(runs):
    (runs[0] / "broken").mkdir()
    (runs[0] / "broken" / "ckpt.pt").write_bytes(b"not a checkpoint")
    with TestClient(app_for(runs[0])) as c:
        assert {r["name"]: r for r in c.get("/api/runs").json()}["broken"]["error"]
        r = c.post("/api/generate", json={"run": "broken"})
        assert r.status_code == 400 and r.json()["field"] == "run"


def test_attention_weights_for_a_position(client, runs):
    model, tok = runs[1]["a"]
    text = "옛날에 한 마을에"
    got = client.post("/api/attention", json={"run": "a", "text": text, "position": 4}).json()
    assert got["tokens"] == list(text[:5]) and got["start"] == 0
    want = attention_maps(model, torch.tensor(tok.encode(text[:5])))[:, :, -1]
    assert torch.allclose(torch.tensor(got["weights"]), want, atol=1e-4)
    long = (TEXT * 2)[:50]  # beyond the 32-token context: the window ending at the position
    got = client.post("/api/attention", json={"run": "a", "text": long}).json()
    assert got["position"] == 49 and got["start"] == 18 and len(got["weights"][1][3]) == 32
    assert all(abs(sum(head) - 1) < 1e-3 for block in got["weights"] for head in block)
    for body, field in (
        ({"text": "옛날", "position": 2}, "position"),
        ({"text": ""}, "text"),
        ({"text": "옛날", "position": -1}, "position"),
    ):
        r = client.post("/api/attention", json={"run": "a", **body})
        assert r.status_code == 422 and r.json()["field"] == field


def test_loaded_runs_are_cached_and_evicted_least_recently_used_first(runs, monkeypatch):
    app = app_for(runs[0], cache_size=2)
    cache, loads, real_load = app.state.playground.cache, [], playground_runs.load_run
    monkeypatch.setattr(playground_runs, "load_run", lambda *a, **k: loads.append(a[0]) or real_load(*a, **k))
    with TestClient(app) as c:
        for name in ("a", "sweep/1", "a", "jamo", "a", "sweep/1"):
            assert c.post("/api/generate", json={"run": name, "max_new_tokens": 1}).status_code == 200
        assert len(loads) == 4 and len(cache._runs) == 2  # a, sweep/1, jamo (evicts sweep/1), sweep/1 again
        make_run(runs[0] / "a", seed=9)  # training rewrote the checkpoint: the next request reloads it
        c.post("/api/generate", json={"run": "a", "max_new_tokens": 1})
        assert len(loads) == 5


async def _call(app, body: dict, disconnect_when) -> list[dict]:
    """One raw ASGI request whose client disconnects once `disconnect_when(sent messages)` is true."""
    payload = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/generate",
        "raw_path": b"/api/generate",
        "query_string": b"",
        "root_path": "",
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
    }
    sent, inbox = [], [{"type": "http.request", "body": payload, "more_body": False}]

    async def receive():
        while not inbox and not disconnect_when(sent):
            await asyncio.sleep(0.01)
        return inbox.pop() if inbox else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    await asyncio.wait_for(app(scope, receive, send), timeout=60)
    return sent


class Samples:
    """Every sample the app makes (its Continuation, recorded): how many still run, ended, and the tokens drawn."""

    def __init__(self, monkeypatch):
        made = self.made = []

        class Recorded(app_module.Continuation):
            def __init__(self, *args):
                super().__init__(*args)
                self.closed = False
                made.append(self)

            def close(self) -> None:
                super().close()
                self.closed = True

        monkeypatch.setattr(app_module, "Continuation", Recorded)

    @property
    def active(self) -> int:
        return sum(not c.closed for c in self.made)

    @property
    def finished(self) -> int:
        return sum(c.closed for c in self.made)

    @property
    def tokens(self) -> int:
        return sum(c.generated for c in self.made if c.closed)


def wait_until_idle(stats, seconds: float = 10) -> None:
    """Sampling stops at the next step boundary after a disconnect; give that step time to end."""
    deadline = time.monotonic() + seconds
    while stats.active and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_disconnects_stops_its_generation(runs, stream, monkeypatch):
    app = app_for(runs[0], max_new_tokens_limit=100_000)
    stats = Samples(monkeypatch)
    started = time.monotonic()
    first_char = (
        (lambda sent: any(m.get("body") for m in sent)) if stream else (lambda sent: time.monotonic() - started > 0.5)
    )
    asyncio.run(_call(app, {"run": "a", "max_new_tokens": 100_000, "stream": stream}, first_char))
    wait_until_idle(stats)
    assert stats.active == 0 and stats.finished == 1 and 0 < stats.tokens < 100_000


def test_eight_concurrent_requests_complete_and_keep_their_own_seeds(runs):
    app = app_for(runs[0])
    want = {(name, seed): expected(*runs[1][name], "옛날에", 60, seed) for name in ("a", "sweep/1") for seed in (1, 2)}

    async def one(client, name, seed, stream):
        body = {"run": name, "prompt": "옛날에", "max_new_tokens": 60, "seed": seed, "stream": stream}
        r = await client.post("/api/generate", json=body)
        return parse_sse(r.text)[-1][1]["text"] if stream else r.json()["text"]

    async def main():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=60) as c:
            jobs = [(n, s, st) for n in ("a", "sweep/1") for s in (1, 2) for st in (True, False)]
            return jobs, await asyncio.gather(*(one(c, *job) for job in jobs))

    jobs, texts = asyncio.run(main())
    assert len(texts) == 8 and all(text == want[(n, s)] for (n, s, _), text in zip(jobs, texts, strict=True))


def test_server_answers_while_a_run_is_busy(runs):
    """A model held by one request (its lock taken) blocks neither the event loop nor other runs."""
    app = app_for(runs[0])

    async def main():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=60) as c:
            await c.post("/api/generate", json={"run": "a", "max_new_tokens": 1})
            entry = next(iter(app.state.playground.cache._runs.values()))
            entry.lock.acquire()
            busy = asyncio.create_task(c.post("/api/generate", json={"run": "a", "max_new_tokens": 5}))
            await asyncio.sleep(0.3)
            listed = await c.get("/api/runs")
            other = await c.post("/api/generate", json={"run": "sweep/1", "max_new_tokens": 5, "stream": False})
            assert listed.status_code == other.status_code == 200 and not busy.done()
            entry.lock.release()
            assert (await busy).status_code == 200

    asyncio.run(main())


def test_serve_config_schema_and_ranges():
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = OmegaConf.to_object(compose(config_name="serve", overrides=["port=0"]))
    assert isinstance(cfg, ServeConfig) and cfg.host == "127.0.0.1" and cfg.port == 0 and cfg.ckpt is None
    for bad in ({"port": 70000}, {"cache_size": 0}, {"max_new_tokens_limit": 0}, {"device": "tpu"}):
        with pytest.raises(ConfigError):
            ServeConfig(**bad)
