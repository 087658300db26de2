import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.helpers import SHARED_CORPUS  # noqa: E402


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--cpu-bf16",
        choices=("0", "1", "other"),
        default=None,
        help="set KOCHAR_CPU_BF16 (common/device.py) for the run: 1 takes the CPU's bfloat16 path, 0 its "
        "float32 path, other the path a plain run on this machine does not take (`make test` runs "
        "the cpu_precision tests so, proving both paths on any CPU)",
    )


def pytest_configure(config) -> None:
    """--cpu-bf16 sets KOCHAR_CPU_BF16 before any test runs and before xdist starts its workers, which inherit it:
    in-process code and every command a test runs then take the same path. An invalid KOCHAR_CPU_BF16 already in
    the environment stops the run in one line, as train.py would."""
    from common.device import CPU_BF16_ENV, cpu_has_native_bf16
    from common.errors import UserError

    try:
        native = cpu_has_native_bf16()
    except UserError as e:
        raise pytest.UsageError(str(e)) from None
    choice = config.getoption("--cpu-bf16")
    if choice and not hasattr(config, "workerinput"):  # a worker has its controller's environment already
        os.environ[CPU_BF16_ENV] = ("0" if native else "1") if choice == "other" else choice


def _cpu_path() -> str:
    from common.device import CPU_BF16_ENV, cpu_has_native_bf16

    path = "bfloat16" if cpu_has_native_bf16() else "float32"
    forced = f"{CPU_BF16_ENV}={os.environ[CPU_BF16_ENV]}" if os.environ.get(CPU_BF16_ENV) else "detected"
    return f"the CPU's precision path: {path} ({forced})"


def pytest_report_header(config) -> str:
    return _cpu_path()


def pytest_terminal_summary(terminalreporter, config) -> None:
    if config.getoption("--cpu-bf16"):  # -q prints no header: say which path the forced run took
        terminalreporter.write_line(f"{_cpu_path()}, forced by --cpu-bf16={config.getoption('--cpu-bf16')}")


@pytest.fixture
def shared_corpus() -> Path:
    if not SHARED_CORPUS.is_file():
        pytest.skip("../shared/corpora/koconovel_dev.txt is not present")
    return SHARED_CORPUS


@pytest.fixture
def corpus(tmp_path) -> Path:
    """About 2,000 characters of the tests' own Korean text (tests.helpers.KOREAN, eight times)."""
    from tests.helpers import KOREAN

    p = tmp_path / "corpus.txt"
    p.write_text(KOREAN * 8, encoding="utf-8")
    return p


@pytest.fixture
def small_corpus(tmp_path) -> Path:
    """A few KB of Korean text written for the tests (ours, not from any corpus)."""
    text = (
        "오늘은 비가 조금 내렸다. 우산을 챙기지 않아서 편의점에 들러 하나 샀다.\n"
        '버스를 기다리는 동안 친구에게 문자를 보냈다. "곧 도착해!"\n'
        "저녁에는 된장찌개를 끓였다. 두부 반 모와 애호박, 양파를 넣었다.\n"
        "Wi-Fi가 자꾸 끊겨서 공유기를 다시 켰더니 괜찮아졌다. 오후 9시 30분.\n"
    )
    p = tmp_path / "corpus.txt"
    p.write_text(text * 30, encoding="utf-8")
    return p


@pytest.fixture(autouse=True)
def sigint_reaches_children():
    """A test run started in the background by a script (`pytest ... &`) inherits SIGINT *ignored*, and so would
    every process it starts: Python then never raises KeyboardInterrupt. Give the children the default action."""
    old = signal.getsignal(signal.SIGINT)
    if old == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a Python handler: children start with SIG_DFL
    yield
    if old == signal.SIG_IGN:
        signal.signal(signal.SIGINT, old)


@pytest.fixture(autouse=True)
def _own_user_cache(tmp_path_factory, monkeypatch):
    """Every test starts with a user cache of its own, empty as on a fresh machine (no folder of ours made in it), and
    the commands it runs inherit it: what a test's compiles measure stays out of the user's cache and other tests."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg_cache")))
