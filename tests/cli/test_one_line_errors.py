"""Every user mistake ends with one `error:` line on stderr and a non-zero exit, never a traceback.

One test per error case, each through the real command line (`train.py` / `generate.py` in a subprocess).
The cases are independent processes, so the module starts the ones selected for this session two at a
time up front; each test then checks its own result.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from tests.helpers import KOREAN, TINY, assert_one_line_error, cli, start, stderr_lines
from training.session import min_corpus_tokens

slow = pytest.mark.slow  # about 30 processes, ~1.5 s of CPU each (mostly importing torch)

TRAIN = ("train.py", *TINY, "train.max_steps=2", "train.eval_interval=2")
GENERATE = ("generate.py", "device=cpu", "max_new_tokens=5")
NEEDED = min_corpus_tokens(32, 0.1)  # model=tiny has context_length 32; data.val_fraction defaults to 0.1

# name: (command, overrides, what the one error line must say). `{d}` is the test folder, `{run}` a trained
# run; train.py cases get their own hydra.run.dir. One case per kind of mistake: the boundaries of each check
# are tested in-process (tests/training/test_configs.py, test_model.py, test_data.py and the end of this file).
CASES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    # the corpus
    "corpus_missing": (TRAIN, ("data.path={d}/nope.txt",), ("corpus file not found", "nope.txt")),
    "corpus_is_empty_folder": (TRAIN, ("data.path={d}/adir",), ("folder with no text files", "holds nothing")),
    "corpus_empty": (TRAIN, ("data.path={d}/empty.txt",), ("empty",)),
    "corpus_too_short": (
        TRAIN,
        ("data.path={d}/short.txt",),
        ("too short", "7 characters", f"needs at least {NEEDED}"),
    ),
    "corpus_binary": (TRAIN, ("data.path={d}/binary.bin",), ("tried UTF-8", "UTF-16", "CP949")),
    # config values
    "size_not_positive": (TRAIN, ("model.context_length=0",), ("model.context_length=0", "positive integer")),
    "head_size_not_divisible": (TRAIN, ("model.num_heads=3",), ("head_size=64", "num_heads=3")),
    "dropout_out_of_range": (TRAIN, ("model.dropout=1.0",), ("model.dropout=1.0", "[0, 1)")),
    "val_fraction_out_of_range": (TRAIN, ("data.val_fraction=0",), ("data.val_fraction=0", "(0, 1)")),
    "value_not_a_number": (TRAIN, ("data.val_fraction=abc",), ("data.val_fraction=abc", "number")),
    "device_unknown": (TRAIN, ("device=tpu",), ("device=tpu", "cpu")),
    "device_cuda_absent": (TRAIN, ("device=cuda",), ("CUDA", "device=cpu")),
    # Hydra's own errors
    "hydra_unknown_key": (TRAIN, ("model.foo=1",), ("unknown config key model.foo",)),
    "hydra_bad_syntax": (TRAIN, ("model.context_length=[",), ("cannot parse", "model.context_length=[")),
    "hydra_unknown_key_generate": (GENERATE, ("ckpt={run}", "foo=1"), ("unknown config key foo",)),
    # checkpoints given to generate.py
    "ckpt_missing": (GENERATE, ("ckpt={d}/nope.pt",), ("checkpoint not found", "nope.pt")),
    "ckpt_no_runs_yet": (GENERATE, (), ("no checkpoint found", "train first")),  # run in an empty folder
    "ckpt_truncated": (GENERATE, ("ckpt={d}/truncated/ckpt.pt",), ("truncated or corrupt",)),
    "ckpt_foreign_bytes": (GENERATE, ("ckpt={d}/foreign/ckpt.pt",), ("not a kochar-gpt checkpoint",)),
    "ckpt_foreign_torch_file": (GENERATE, ("ckpt={d}/foreign_torch/ckpt.pt",), ("not a kochar-gpt checkpoint",)),
    # checkpoints given to train.resume
    "resume_missing": (TRAIN, ("train.resume={d}/no_such_run",), ("checkpoint not found", "no_such_run")),
    "resume_truncated": (TRAIN, ("train.resume={d}/truncated",), ("truncated or corrupt",)),
    "resume_foreign": (TRAIN, ("train.resume={d}/foreign_torch",), ("not a kochar-gpt checkpoint",)),
    "resume_without_optimizer": (
        TRAIN,
        ("train.resume={d}/no_optimizer",),  # refused after the model is built
        ("lacks the training state's optimizer", "cannot be resumed", "generate.py"),
    ),
    "resume_vocabulary_mismatch": (
        TRAIN,
        ("train.resume={d}/run_for_resume", "data.path={d}/latin.txt"),
        ("outside the vocabulary", "data.path"),
    ),
    "run_dir_exists": (
        TRAIN,
        ("data.path={d}/corpus.txt",),
        ("already holds a checkpoint", "train.resume=", "train.overwrite=true"),
    ),
    # sampling arguments
    "max_new_tokens_negative": (GENERATE, ("ckpt={run}", "max_new_tokens=-1"), ("max_new_tokens", ">= 0")),
    "top_p_out_of_range": (GENERATE, ("ckpt={run}", "top_p=1.5"), ("top_p", "(0, 1]")),
    "top_k_below_one": (GENERATE, ("ckpt={run}", "top_k=0"), ("top_k", ">= 1")),
    "sampling_value_not_a_number": (GENERATE, ("ckpt={run}", "max_new_tokens=many"), ("max_new_tokens=many",)),
}
# Refused once train.py has chosen its precision (training/session.py): on either CPU precision path the start prints
# nothing before its error line, so `make test` runs these again on the other path (the cpu_precision marker).
AFTER_PRECISION = {name for name in CASES if name.startswith(("corpus_", "resume_"))} | {"run_dir_exists"}
UNSEEN_PROMPT = "봄이 ☃ꙮ"  # two characters no Korean corpus of ours has


def _make_files(d: Path) -> Path:
    """Corpora and checkpoints, good and bad; returns a trained run directory."""
    (d / "adir").mkdir()
    (d / "empty.txt").write_bytes(b"")
    (d / "short.txt").write_text("가나다라마바사", encoding="utf-8")
    (d / "binary.bin").write_bytes(bytes(range(256)) * 64)
    (d / "corpus.txt").write_text(KOREAN * 8, encoding="utf-8")
    (d / "latin.txt").write_text(("Zebra quiz, jumping fox. " * 20 + KOREAN) * 2, encoding="utf-8")
    (d / "no_runs_here").mkdir()

    run = d / "run"
    r = cli(*TRAIN, f"data.path={d}/corpus.txt", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr
    shutil.copytree(run, d / "run_for_resume")
    ckpt = (run / "ckpt.pt").read_bytes()
    for name, data in (
        ("truncated", ckpt[: len(ckpt) // 2]),
        ("foreign", b"this is not a checkpoint, only some bytes\n" * 40),
    ):
        (d / name).mkdir()
        (d / name / "ckpt.pt").write_bytes(data)
    (d / "foreign_torch").mkdir()
    torch.save({"state_dict": {"w": torch.zeros(3)}, "epoch": 3}, d / "foreign_torch" / "ckpt.pt")
    payload = torch.load(run / "ckpt.pt", weights_only=True)
    del payload["training"]["optimizer"]
    (d / "no_optimizer").mkdir()
    torch.save(payload, d / "no_optimizer" / "ckpt.pt")
    return run


def _run_case(name: str, d: Path, run: Path):
    command, overrides, _ = CASES[name]
    args = [*command, *(o.format(d=d, run=run) for o in overrides)]
    if command is TRAIN:
        # run_dir_exists trains into a copy of the trained run; the others into a fresh folder each
        target = d / "run_exists" if name == "run_dir_exists" else d / "runs" / name
        if name == "run_dir_exists":
            shutil.copytree(run, target)
        args.append(f"hydra.run.dir={target}")
    return cli(*args, cwd=d / "no_runs_here" if name == "ckpt_no_runs_yet" else None)


@pytest.fixture(scope="module")
def results(request, tmp_path_factory) -> dict:
    """Run the selected cases, two processes at a time (this machine has two cores)."""
    selected = {
        item.callspec.params.get("case")
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec")
    }
    d = tmp_path_factory.mktemp("errors")
    run = _make_files(d)
    names = [n for n in CASES if n in selected]
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {n: pool.submit(_run_case, n, d, run) for n in names}
        if "unseen_prompt" in selected:
            futures["unseen_prompt"] = pool.submit(
                cli, *GENERATE, f"ckpt={run}", f"prompt={UNSEEN_PROMPT}", "max_new_tokens=10", "seed=3"
            )
    out = {n: f.result() for n, f in futures.items()}
    out["dir"] = d
    return out


@slow
@pytest.mark.parametrize(
    "case", [pytest.param(name, marks=pytest.mark.cpu_precision) if name in AFTER_PRECISION else name for name in CASES]
)
def test_error_case(case, results):
    if case == "device_cuda_absent" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert_one_line_error(results[case], *CASES[case][2])


@slow
@pytest.mark.parametrize("case", ["unseen_prompt"])
def test_prompt_with_unseen_characters_works_with_one_warning(case, results):
    r = results[case]
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    weights, *lines = stderr_lines(r.stderr)  # generate.py's first line names the weights it samples
    assert weights.startswith("weights: raw (the run kept no average: train.average=none) from "), weights
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("warning: ") and "'☃'" in lines[0] and "'ꙮ'" in lines[0], lines[0]
    assert "UserWarning" not in lines[0] and ".py:" not in lines[0]
    assert r.stdout.startswith(UNSEEN_PROMPT) and len(r.stdout.rstrip("\n")) >= len(UNSEEN_PROMPT)


@slow
def test_failed_commands_leave_no_checkpoint_behind(results):
    """A refused run writes no checkpoint, and never touches the run it refused to overwrite."""
    d = results["dir"]
    for name in CASES:
        if CASES[name][0] is TRAIN and name != "run_dir_exists" and (d / "runs" / name).exists():
            assert not (d / "runs" / name / "ckpt.pt").exists(), name
    if (d / "run_exists").exists():
        assert (d / "run_exists" / "ckpt.pt").read_bytes() == (d / "run" / "ckpt.pt").read_bytes()


@slow
def test_unreadable_corpus(tmp_path):
    corpus = tmp_path / "locked.txt"
    corpus.write_text(KOREAN * 4, encoding="utf-8")
    corpus.chmod(0)
    if os.access(corpus, os.R_OK):
        corpus.chmod(0o644)
        pytest.skip("this user (root) can read a chmod 000 file; test_unreadable_corpus_message covers the message")
    try:
        r = cli(*TRAIN, f"data.path={corpus}", f"hydra.run.dir={tmp_path / 'run'}")
    finally:
        corpus.chmod(0o644)
    assert_one_line_error(r, "cannot read corpus file", "locked.txt")


def test_unreadable_corpus_message(tmp_path, monkeypatch):
    """The same check in-process, where a PermissionError is simulated (so it also runs as root)."""
    from common.errors import UserError
    from data.corpus import load_corpus

    corpus = tmp_path / "locked.txt"
    corpus.write_text(KOREAN, encoding="utf-8")
    real_open = Path.open

    def denied(self, *args, **kwargs):
        if self == corpus:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", denied)
    with pytest.raises(UserError, match="cannot read corpus file .*locked.txt: Permission denied"):
        load_corpus(corpus, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize(
    "data,needle",
    [
        (
            "정상적인 글".encode() + b"\xff\xfe\xff" * 50 + b"\x80abc" * 50,
            "tried UTF-8, UTF-8 with BOM, UTF-16 with BOM, CP949",
        ),
        (b"", "empty"),
    ],
)
def test_undecodable_and_empty_corpus_messages(tmp_path, data, needle):
    from common.errors import UserError
    from data.corpus import load_corpus

    corpus = tmp_path / "c.txt"
    corpus.write_bytes(data)
    with pytest.raises(UserError, match=re.escape(needle)):
        load_corpus(corpus, cache_dir=tmp_path / "cache")


NOT_NUMBERS = [
    ("model.dropout=often", "model.dropout=often is invalid: it must be a number"),
    ("train.lr=fast", "train.lr=fast is invalid: it must be a number"),
    ("train.max_seconds=soon", "train.max_seconds=soon is invalid: it must be a number"),
    ("train.beta2=1.0", "train.beta2=1.0 is invalid: it must be a finite number in [0, 1)"),
    ("seed=abc", "seed=abc is invalid: it must be an integer"),
    ("train.batch_size=many", "train.batch_size=many is invalid: it must be an integer"),
    ("model.num_heads=2.5", "model.num_heads=2.5 is invalid: it must be an integer"),
    ("train.compile=maybe", "train.compile=maybe is invalid: it must be true, false or auto"),
    ("train.no_such_key=1", "unknown config key train.no_such_key"),
]


def test_values_of_the_wrong_type_are_refused_while_composing(tmp_path):
    """The schema refuses them in one line before any folder exists (the run folder is never created)."""
    from tests.helpers import cli_all

    runs = [tmp_path / f"run{i}" for i in range(len(NOT_NUMBERS))]
    results = cli_all(
        *[(*TRAIN, override, f"hydra.run.dir={run}") for (override, _), run in zip(NOT_NUMBERS, runs, strict=True)]
    )
    for (_, needle), r, run in zip(NOT_NUMBERS, results, runs, strict=True):
        assert_one_line_error(r, needle)
        assert not run.exists()


def test_checkpoint_files_that_are_not_checkpoints(tmp_path):
    from common.errors import UserError
    from inference.checkpoint import load_checkpoint
    from inference.run_files import resolve_checkpoint

    (tmp_path / "empty_run").mkdir()
    with pytest.raises(UserError, match="no ckpt.pt in run directory"):
        resolve_checkpoint(tmp_path / "empty_run")
    (tmp_path / "zero.pt").write_bytes(b"")
    with pytest.raises(UserError, match="truncated or corrupt"):
        load_checkpoint(tmp_path / "zero.pt")
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(UserError, match="not a kochar-gpt checkpoint"):
        load_checkpoint(tmp_path / "list.pt")


@pytest.mark.parametrize(
    "report,expected",
    [
        (
            "In 'train': Could not find 'model/nope'\n\nAvailable options in 'model':\n\tbase\n\tsmall\n\ttiny\n"
            "Config search path:\n\tprovider=hydra, path=pkg://hydra.conf\n",
            "In 'train': Could not find 'model/nope'; Available options in 'model': base, small, tiny "
            "(--help lists the config groups and keys)",
        ),
        (
            "Could not override 'train.lr'.\nTo append to your config use +train.lr=1\nKey 'lr' is not in struct\n"
            "    full_key: train.lr\n    object_type=dict\n\nSet the environment variable HYDRA_FULL_ERROR=1 for a "
            "complete stack trace.\n",
            "unknown config key train.lr; check its spelling",
        ),
    ],
)
def test_hydra_reports_fold_into_one_line(report, expected):
    from cli.entry import hydra_report_line

    folded = hydra_report_line(report)
    assert "\n" not in folded and folded.startswith(expected)


@slow
def test_kochar_debug_shows_the_traceback_of_a_user_error(tmp_path):
    r = cli(*TRAIN, "model.context_length=0", f"hydra.run.dir={tmp_path / 'run'}", env={"KOCHAR_DEBUG": "1"})
    assert r.returncode != 0
    assert "Traceback" in r.stderr and "ConfigError: model.context_length=0 is invalid" in r.stderr  # a UserError


@slow
@pytest.mark.parametrize("compile_setting", ["false", "auto", "true"])
def test_an_inductor_cache_folder_that_cannot_be_made_is_one_line_naming_the_variable(tmp_path, compile_setting):
    """PyTorch makes inductor's folder as soon as its compiler is imported (building the optimizer imports it), so
    a run refuses an unusable one at start, whatever train.compile says."""
    (tmp_path / "afile").write_text("not a folder")
    r = cli(
        *TRAIN,
        f"data.path={Path('data/corpus/ko_default.txt').resolve()}",
        f"train.compile={compile_setting}",
        f"hydra.run.dir={tmp_path / 'run'}",
        env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "afile" / "cache")},
    )
    assert_one_line_error(
        r,
        f"TORCHINDUCTOR_CACHE_DIR='{tmp_path / 'afile' / 'cache'}' cannot be used",
        "a part of the path is a file",
        "unset it",
    )


@slow
def test_inductors_default_cache_folder_that_cannot_be_made_is_one_line_naming_the_variable(tmp_path, monkeypatch):
    import getpass

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # inductor sets it in a process that asked for it

    (tmp_path / f"torchinductor_{getpass.getuser()}").write_text("a file where inductor's folder goes")
    proc = start(*TRAIN, f"hydra.run.dir={tmp_path / 'run'}", env={"TMPDIR": str(tmp_path)})  # a fresh interpreter
    out, err = proc.communicate(timeout=300)
    r = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert_one_line_error(
        r,
        "TORCHINDUCTOR_CACHE_DIR's default folder",
        "it is a file, not a folder",
        "set TORCHINDUCTOR_CACHE_DIR to a folder you can write",
    )
