"""The playground over real HTTP: `python serve.py` as a user starts it, a real socket, and a real browser
(headless Chromium from the OS packages, driven by Selenium through the system chromedriver).

The browser test needs /usr/bin/chromium and /usr/bin/chromedriver (`.ci/install_browser.sh` installs them);
without them it skips, and says so loudly. Nothing here downloads a browser or a driver.
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import httpx
import pytest
import uvicorn

from tests.conftest import ROOT
from tests.playground.test_api import Samples, app_for, make_run, runs, wait_until_idle  # noqa: F401 - runs is a fixture

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# The machine may be offline: without these Chromium keeps trying to reach Google's services.
CHROME_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--lang=ko-KR",
    "--window-size=1280,1000",
)


def start_server(*overrides: str, timeout: float = 120) -> tuple[subprocess.Popen, str]:
    """`python serve.py <overrides> port=0` -> (the process, the URL it printed)."""
    proc = subprocess.Popen(
        [sys.executable, "serve.py", *overrides, "port=0"],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"},
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        found = [m.group(0) for line in list(lines) if (m := re.search(r"http://\S+/", line))]
        if found:
            return proc, found[0]
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"serve.py printed no URL: {''.join(lines)[-2000:]}")


def stop_server(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


def test_serve_py_prints_the_url_and_binds_loopback(runs):  # noqa: F811 - the fixture
    proc, url = start_server(f"runs_dir={runs[0]}")
    try:
        assert url.startswith("http://127.0.0.1:")
        listed = httpx.get(url + "api/runs", timeout=30).json()
        assert {r["name"] for r in listed} == {"a", "sweep/1", "jamo"}
        assert httpx.get(url, timeout=30).status_code == 200
        # A page elsewhere reaching 127.0.0.1 through its own DNS name (DNS rebinding) is refused.
        assert httpx.get(url + "api/runs", headers={"Host": "evil.example"}, timeout=30).status_code == 400
        assert httpx.get(url.replace("127.0.0.1", "localhost") + "api/runs", timeout=30).status_code == 200
    finally:
        assert stop_server(proc) in (0, 130)


def test_disconnect_over_a_real_socket_stops_generation(runs, monkeypatch):  # noqa: F811 - the fixture
    app = app_for(runs[0], max_new_tokens_limit=100_000)
    stats = Samples(monkeypatch)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        with httpx.stream(
            "POST", f"http://127.0.0.1:{port}/api/generate", timeout=30, json={"run": "a", "max_new_tokens": 100_000}
        ) as r:
            assert next(r.iter_lines()).startswith("event: char")
        wait_until_idle(stats)
        assert stats.active == 0 and 0 < stats.tokens < 100_000
    finally:
        server.should_exit = True
        thread.join(10)


def browser_or_skip():
    """A headless Chromium driven through the system chromedriver, or a loud skip when there is none."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("the selenium package (pip install -r requirements-dev.txt)")
    if missing:
        message = (
            f"BROWSER TEST SKIPPED: {', '.join(missing)} missing; run .ci/install_browser.sh "
            "(apt-get install chromium chromium-driver fonts-noto-cjk)"
        )
        print(f"\n{'!' * 100}\n{message}\n{'!' * 100}", file=sys.stderr)
        warnings.warn(message, stacklevel=2)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROME_FLAGS, f"--user-data-dir={tempfile.mkdtemp(prefix='kochar-chromium-')}"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))


def wait_for(driver, condition, timeout: float = 60, what: str = "the page"):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(condition, f"timed out waiting for {what}")


def sample_in_browser(
    driver, url: str, prompt: str, max_new_tokens: int, compare: bool = False, wait: bool = True
) -> None:
    """Open the page, type the prompt, generate, and (if `wait`) wait until every pane is done."""
    from selenium.webdriver.common.by import By

    driver.get(url)
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#run-a option"), what="the run list")
    box = driver.find_element(By.ID, "prompt")
    box.clear()
    box.send_keys(prompt)
    assert box.get_attribute("value") == prompt
    field = driver.find_element(By.ID, "max-new-tokens")
    field.clear()
    field.send_keys(str(max_new_tokens))
    if compare:
        driver.find_element(By.ID, "compare").click()
    # Count the separate moments new characters appear: a response that arrived all at once shows one.
    driver.execute_script("""
        window.kocharBatches = 0;
        new MutationObserver(() => window.kocharBatches++).observe(
            document.querySelector('#pane-a .text'), {childList: true});""")
    driver.find_element(By.ID, "generate").click()
    if not wait:
        return
    wait_for(driver, lambda d: d.find_element(By.ID, "status").text.startswith(("완료", "오류")), 120, "sampling")
    assert driver.find_element(By.ID, "status").text.startswith("완료"), driver.find_element(By.ID, "status").text


def hover_and_read(driver, index: int) -> tuple[str, str]:
    """Hover the index-th generated character of pane A -> (the character, the probability the tooltip shows)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    span = driver.find_elements(By.CSS_SELECTOR, "#pane-a .ch")[index]
    ActionChains(driver).move_to_element(span).perform()
    wait_for(driver, lambda d: d.find_element(By.ID, "tooltip").is_displayed(), what="the tooltip")
    return span.text, driver.find_element(By.CSS_SELECTOR, "#tooltip .tip-prob").text


def show_attention(driver, index: int) -> int:
    """Click the index-th generated character of pane A; the number of attention cells drawn."""
    from selenium.webdriver.common.by import By

    driver.find_elements(By.CSS_SELECTOR, "#pane-a .ch")[index].click()
    wait_for(driver, lambda d: d.find_element(By.ID, "attention").is_displayed(), what="the attention view")
    return len(driver.find_elements(By.CSS_SELECTOR, "#attention-grid td"))


@pytest.mark.slow
def test_page_streams_a_korean_sample_and_shows_probabilities(runs, tmp_path):  # noqa: F811 - the fixture
    from selenium.webdriver.common.by import By

    driver = browser_or_skip()
    proc, url = start_server(f"runs_dir={runs[0]}", "ckpt=" + str(runs[0] / "a"), "max_new_tokens_limit=50000")
    try:
        sample_in_browser(driver, url, "옛날에", 300)
        chars = driver.find_elements(By.CSS_SELECTOR, "#pane-a .ch")
        assert len(chars) == 300 and driver.find_element(By.CSS_SELECTOR, "#pane-a .prompt").text == "옛날에"
        assert driver.execute_script("return window.kocharBatches") > 1, "the text did not stream in"
        char, shown = hover_and_read(driver, 4)
        want = httpx.post(
            url + "api/generate",
            timeout=60,
            json={"run": "a", "prompt": "옛날에", "max_new_tokens": 300, "stream": False},
        ).json()["tokens"][4]
        assert char == want["text"] and abs(float(shown.rstrip("%")) - 100 * want["prob"]) <= 0.05 + 1e-9
        assert len(driver.find_elements(By.CSS_SELECTOR, "#tooltip .tip-top tr")) == len(want["top"]) == 5
        assert show_attention(driver, 4) == 2 * 4 * (3 + 4)  # blocks x heads x the 7 tokens before it
        assert driver.save_screenshot(str(tmp_path / "playground.png"))
        assert (tmp_path / "playground.png").stat().st_size > 10_000
        # Stop: the page aborts its request (the server stops sampling: tests/playground/test_api.py) and says so.
        sample_in_browser(driver, url, "나는", 50_000, wait=False)
        wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#pane-a .ch"), what="the first character")
        driver.find_element(By.ID, "stop").click()
        wait_for(driver, lambda d: d.find_element(By.ID, "status").text.startswith("멈춤"), what="the stop")
        assert len(driver.find_elements(By.CSS_SELECTOR, "#pane-a .ch")) < 50_000
    finally:
        driver.quit()
        stop_server(proc)
