"""The first hour of a new user: paths with `~` and Hangul, run folders that paste back as printed, help that
belongs to each script, one line for every failure, a progress bar that tells the truth, and no empty runs."""

import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from cli.hydra_setup import NAME_BYTES, _safe_name, _suffix
from cli.overrides import hydra_quote, prepare_overrides
from tests.helpers import KOREAN, ROOT, TINY, assert_one_line_error, cli, cli_all, stderr_lines

PARSER = OverridesParser.create()
HOME = str(Path.home())


def _hydra_value(override: str):
    """The value as the config will hold it: Hydra's parse, then OmegaConf's (which unescapes `\\${`)."""
    value = PARSER.parse_override(override).value()
    return OmegaConf.create({"v": value}).v if isinstance(value, str) else value


# -- paths on the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "typed,expected",
    [
        ("data.path=~/novels.txt", f"{HOME}/novels.txt"),
        ("data.path=$HOME/novels.txt", f"{HOME}/novels.txt"),
        ("data.path=${HOME}/novels.txt", f"{HOME}/novels.txt"),
        ("data.path='~/my novels.txt'", f"{HOME}/my novels.txt"),  # quoted for Hydra by the user: still expanded
        ("data.cache_dir=~", HOME),
        ("hydra.run.dir=~/runs/소설", f"{HOME}/runs/소설"),
        (
            "ckpt=runs/2026-11-22_17-14-32_data.path=x,model=tiny,train.max_steps=100",  # an old-style folder name
            "runs/2026-11-22_17-14-32_data.path=x,model=tiny,train.max_steps=100",
        ),
        ("train.resume=/tmp/my run (2)/ckpt.pt", "/tmp/my run (2)/ckpt.pt"),
        ("train.resume=runs/it's", "runs/it's"),
        (
            "ckpt=runs/2026-11-22_17-14-32_model-tiny+train.lr-0.003",
            "runs/2026-11-22_17-14-32_model-tiny+train.lr-0.003",
        ),
        ("data.path=null", None),
    ],
)
def test_path_values_mean_what_was_typed(typed, expected):
    (override,) = prepare_overrides([typed])
    assert _hydra_value(override) == expected


def test_only_path_keys_are_rewritten_and_sweeps_split():
    assert prepare_overrides(["prompt=~/x", "train.lr=0.1", "--cfg", "job"]) == [
        "prompt=~/x",
        "train.lr=0.1",
        "--cfg",
        "job",
    ]
    swept = prepare_overrides(["-m", "data.path=~/a.txt,~/b.txt"])[1]
    assert PARSER.parse_override(swept).is_sweep_override()
    assert [str(v) for v in PARSER.parse_override(swept).sweep_string_iterator()] == [f"{HOME}/a.txt", f"{HOME}/b.txt"]
    assert prepare_overrides(["prompt=안녕"]) == ["prompt='안녕'"]  # Hangul values are still quoted for Hydra


@pytest.mark.parametrize(
    "value",
    [
        "a",
        "it's",
        'say "hi"',
        "back\\slash",
        "ends\\",
        "quote\\'d",
        "${oops}",
        "a b,c=d[e]{f}(g)",
        "소설 1.txt",
        "$HOME",
        "~",
    ],
)
def test_hydra_quote_round_trips(value):
    assert _hydra_value(f"ckpt={hydra_quote(value)}") == value


# -- run-folder names --------------------------------------------------------------------------------------


def test_names_fit_the_file_system_in_bytes_and_stay_distinct(tmp_path):
    corpus = "가" * 66 + ".txt"  # 202 bytes in UTF-8: a legal file name, over the old 150-character cut in bytes
    assert len(corpus.encode()) > 200
    many = [f"train.sample_tokens={n}" for n in range(30)]
    names = {_safe_name([f"data.path=/home/u/{corpus}", "model=tiny", *many, f"seed={seed}"]) for seed in range(5)}
    assert len(names) == 5  # the cut name is the same; the hash of the full overrides differs
    for name in names:
        assert len(name.encode()) <= NAME_BYTES and re.fullmatch(r"[\w.+-]+", name)
        folder = tmp_path / f"2026-11-22_17-14-32{_suffix([f'data.path=/home/u/{corpus}', *many])}"
        folder.mkdir(exist_ok=True)
        (tmp_path / f"2026-11-22_17-14-32_{name}").mkdir()
        assert len(f"2026-11-22_17-14-32_{name}".encode()) <= 255 - 32  # room for a suffix the program adds
    assert _safe_name(["model=tiny", "train.lr=0.003"]) == "model-tiny+train.lr-0.003"  # short names stay plain


# -- failures in one line ------------------------------------------------------------------------------------


def test_an_unexpected_failure_is_one_line_naming_the_traceback_file(tmp_path, capsys, monkeypatch):
    from cli.entry import run_cli

    monkeypatch.delenv("KOCHAR_DEBUG", raising=False)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    def broken():
        raise RuntimeError("the widget broke\nsecond line")

    for folder in (tmp_path, tmp_path / "gone"):
        with pytest.raises(SystemExit) as e:
            run_cli(broken, traceback_dir=folder)
        assert e.value.code == 1
        (line,) = stderr_lines(capsys.readouterr().err)
        assert line.startswith("error: ") and "RuntimeError: the widget broke" in line and "second" not in line
        assert "tests/cli/test_first_hour.py" in line and "Traceback" not in line
        path = Path(line.rsplit("the full traceback is in ", 1)[1])
        assert path.parent == (tmp_path if folder == tmp_path else Path(path).parent) and path.is_file()
        assert "Traceback (most recent call last)" in path.read_text() and "second line" in path.read_text()
        assert (path.parent == tmp_path) == (folder == tmp_path)


@pytest.mark.parametrize("where", ["inside_a_file", "name_too_long"])
def test_hydra_failing_to_make_the_run_folder_is_one_line(tmp_path, where):
    (tmp_path / "file").write_text("x")
    target = tmp_path / "file" / "run" if where == "inside_a_file" else tmp_path / ("런" * 90)
    r = cli("train.py", *TINY, f"hydra.run.dir={target}")
    if where == "inside_a_file":
        assert "Not a directory" in assert_one_line_error(r, "cannot create or write", str(target))
    else:  # whichever check meets the long name first, the user sees one line naming the problem
        assert "File name too long" in assert_one_line_error(r, code=r.returncode) and r.returncode in (1, 2)


# -- the progress bar ----------------------------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("budget,binds", [(10.0, "max_seconds"), (1000.0, "max_steps")])
def test_the_bar_counts_toward_the_limit_that_will_stop_the_run(budget, binds):
    from training.reporting.progress import RunBar

    clock = Clock()
    bar = RunBar(1000, 0, budget, clock, file=io.StringIO())
    for _ in range(20):  # 0.1 s per step: 1000 steps take 100 s
        clock.now += 0.1
        bar.update(1)
        bar.set_postfix(loss="1.0", refresh=False)
    assert bar.limit == binds
    if binds == "max_seconds":
        assert bar.total == budget and bar.unit == "s" and bar.n == pytest.approx(2.0)
        assert bar.format_dict["rate"] == 1.0 and "until=10s" in bar.postfix and "step=20" in bar.postfix
    else:
        assert bar.total == 1000 and bar.n == 20 and "until=step 1000" in bar.postfix
    plain = RunBar(50, 0, None, clock, file=io.StringIO())
    plain.update(1)
    assert plain.total == 50 and plain.limit == "max_steps"


# -- --help --------------------------------------------------------------------------------------------------


def _key_lines(text: str) -> list[str]:
    return text.split("Keys (key=default, then its meaning):\n", 1)[1].split("\n\n", 1)[0].splitlines()


def test_each_script_helps_with_its_own_keys():
    train, generate, evaluate = cli_all(
        ("train.py", "model=tiny", "--help"), ("generate.py", "--help"), ("evaluate.py", "--help")
    )
    for r, script in ((train, "train.py"), (generate, "generate.py"), (evaluate, "evaluate.py")):
        assert r.returncode == 0 and r.stderr == "", r.stderr
        examples = r.stdout.split("Most common:\n", 1)[1].split("\n\n", 1)[0].splitlines()
        assert len(examples) == 3 and all(e.strip().startswith(f"python {script}") for e in examples)
        keys = _key_lines(r.stdout)
        assert keys and all(re.match(r"  \S+=\S*.*\s{2}\S", k) for k in keys), [k for k in keys if "  " not in k[2:]]
    assert "model.context_length=32 " in train.stdout and "model: base, small, tiny" in train.stdout
    for r in (generate, evaluate):
        assert "\nmodel:" not in r.stdout and "experiment" not in r.stdout and "\n  model." not in r.stdout
    assert "  ckpt=null " in generate.stdout and "  temperature=0.8 " in generate.stdout
    assert "  data.path=null " in evaluate.stdout and "  stride=null " in evaluate.stdout


# -- failed starts leave nothing in runs/ ---------------------------------------------------------------------


@pytest.mark.cpu_precision  # a start's output, on either CPU precision path (`make test` runs both)
def test_a_failed_start_leaves_no_run_folder(tmp_path):
    cases = (("data.path=missing.txt",), ("model.dropout=1.5",), ("train.lr=abc",), ("model.heads=4",))
    for case in cases:  # from a folder of our own, where runs/ must stay absent
        r = cli(str(ROOT / "train.py"), *TINY, *case, cwd=tmp_path)
        assert_one_line_error(r)
        assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir()), case


# -- the first hour, through a real shell ---------------------------------------------------------------------


def _bash(line: str, cwd: Path, home: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("KOCHAR_DEBUG", None)
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _printed_run(stdout: str) -> str:
    match = re.search(r"^run: (\S+)  step", stdout, re.MULTILINE)
    assert match, stdout
    return match.group(1)


@pytest.fixture
def first_hour(tmp_path):
    """A home folder holding a corpus with a 200-byte Korean name, and an empty working folder."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(), work.mkdir()
    name = "한국어소설" * 13 + ".txt"  # 65 syllables: 199 bytes
    (home / name).write_text(KOREAN * 4, encoding="utf-8")
    return home, work, name


@pytest.mark.slow
def test_train_sample_evaluate_and_resume_by_pasting_what_was_printed(first_hour):
    home, work, name = first_hour
    py = f"{sys.executable} {ROOT}"
    settings = " ".join(TINY) + " train.eval_interval=3 train.lr=0.003 data.val_fraction=0.2"
    r = _bash(f"{py}/train.py data.path=~/{name} train.max_steps=6 {settings}", work, home)
    assert r.returncode == 0, r.stderr[-2000:]
    run = _printed_run(r.stdout)
    folder = Path(run)
    assert folder.parent == work / "runs" and (folder / "ckpt.pt").is_file()
    assert len(folder.name.encode()) <= 255 and "한국어소설" in folder.name and "model-tiny" in folder.name
    for line in (
        f"{py}/generate.py ckpt={run} prompt=봄이 max_new_tokens=5",
        f"{py}/evaluate.py ckpt={run}/best.pt data.path=~/{name} progress=false",
        f"{py}/train.py train.resume={run} train.max_steps=9",
    ):
        r = _bash(line, work, home)
        assert r.returncode == 0, f"{line}\n{r.stderr[-2000:]}"
    assert "step 9" in r.stdout and _printed_run(r.stdout) == run
    # A resume that fails (a value out of range) must leave the real run exactly where it was.
    r = _bash(f"{py}/train.py train.resume={run} train.lr=-1", work, home)
    assert_one_line_error(r, "train.lr")
    assert (folder / "ckpt.pt").is_file() and (folder / "best.pt").is_file()
    assert sorted(p.name for p in (work / "runs").iterdir()) == [folder.name]


@pytest.mark.slow
def test_the_resume_hint_after_ctrl_c_pastes_back(first_hour):
    home, work, name = first_hour
    env = {**os.environ, "HOME": str(home), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    args = [
        sys.executable,
        str(ROOT / "train.py"),
        f"data.path={home / name}",
        *TINY,
        "train.max_steps=100000",
        "train.eval_interval=100000",
        "train.lr_decay_steps=1000",
    ]
    proc = subprocess.Popen(args, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list((work / "runs").glob("*/events.out.tfevents.*")) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.5)  # the loop has started: the events file is written just before it
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    hint = re.search(r"resume with (train\.resume=\S+)", out + err)
    assert hint, out + err
    assert "val loss not evaluated yet" in out and "nan" not in out
    step = int(re.search(r"^run: \S+  step (\d+)", out, re.MULTILINE).group(1))
    r = _bash(f"{sys.executable} {ROOT}/train.py {hint.group(1)} train.max_steps={step + 2}", work, home)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"step {step + 2}" in r.stdout


@pytest.mark.parametrize(
    "overrides,name", [((), "sweep"), (("experiment=width",), "width"), (("+experiment=heads",), "heads")]
)
def test_a_sweep_folder_names_its_experiment_or_says_sweep(overrides, name):
    from hydra import compose, initialize_config_dir

    from cli.hydra_setup import legacy_experiment_override
    from tests.docs.test_commands_as_pasted import compose_command

    compose_command("train.py", [])  # registers the schemas and resolvers the entry script would
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=legacy_experiment_override(list(overrides)), return_hydra_config=True)
    assert re.fullmatch(rf"runs/\d{{4}}-\d\d-\d\d_\d\d-\d\d-\d\d_{name}", cfg.hydra.sweep.dir)
