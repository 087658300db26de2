"""Every command line the READMEs and the manual (docs/en, docs/ko) show works as pasted: bash splits it, the
entry script's own argv rewrite runs, and Hydra composes the config from it (nothing is trained). Every other
line of a bash block is bash that parses, and is a command this file checks too: `make` names a target of
the Makefile, `python -m data.prepare`, `bench.py` and `benchmarks/time_budget.py` accept their flags (and
time_budget's `--run` overrides compose for train.py), and anything else is one of a few known tools. The
pages cannot drift from the code again."""

import itertools
import re
import shlex
import subprocess
from unittest import mock

import pytest
from omegaconf import OmegaConf, open_dict

from tests.helpers import ROOT


def markdown_pages() -> list[str]:
    """Every page a user reads: both READMEs, the benchmarks' and the notebooks' READMEs, and the manual in every
    language."""
    docs = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))
    return ["README.md", "README.ko.md", "benchmarks/README.md", "notebooks/README.md", "notebooks/README.ko.md", *docs]


PAGES = markdown_pages()
SCRIPTS = {
    "train.py": "train",
    "generate.py": "generate",
    "evaluate.py": "evaluate",
    "serve.py": "serve",
    "export.py": "export",
}
# A command for one of the entry scripts: `python train.py ...`, `$ python ...`, `torchrun ... train.py ...`.
COMMAND = re.compile(r"^(?:\$ )?(?:python3? |torchrun [^\n]*?)(train|generate|evaluate|serve|export)\.py\b")
FENCED = re.compile(r"^```([a-z]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _inline_commands(text: str) -> list[str]:
    """`python train.py ...` inside backticks in the prose, a line break in the span read as a space."""
    spans = re.findall(r"`(python3? (?:train|generate|evaluate|serve|export)\.py[^`]*)`", text)
    return [" ".join(s.split()) for s in spans]


def _logical_lines(block: str) -> list[str]:
    """The block's lines, a line ending in a backslash joined to the next as bash does."""
    return block.replace("\\\n", " ").splitlines()


def readme_commands() -> list[tuple[str, str, bool]]:
    found = []
    for name in PAGES:
        text = (ROOT / name).read_text(encoding="utf-8")
        for _, body in FENCED.findall(text):
            block = _logical_lines(body)
            for i, ln in enumerate(block):
                # `$ command` then `error: ...` shows a mistake on purpose: it must paste, and may be refused.
                refused = i + 1 < len(block) and block[i + 1].startswith("error:")
                if COMMAND.match(ln.strip()):
                    found.append((name, ln.strip(), refused))
                elif ln.startswith("runs/") and "python " in ln:  # a folder listed beside the command making it
                    found.append((name, ln.split("  ", 1)[1].strip(), False))
        found += [(name, ln, False) for ln in _inline_commands(text)]
    return found


COMMANDS = readme_commands()


def _bash_words(line: str, home) -> list[str]:
    """The words bash passes to the program for this command line, pasted as it stands."""
    line = line.removeprefix("$ ")
    assert "$(" not in line or "data.prepare" in line, line
    line = line.replace("$(python -m data.prepare koconovel --quiet)", "data.path=/tmp/koconovel.txt")
    r = subprocess.run(
        ["bash", "-c", "f() { printf '%s\\0' \"$@\"; }; f " + line],
        capture_output=True,
        text=True,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
        cwd=home,
        timeout=30,
    )  # `>` writes there
    assert r.returncode == 0 and not r.stderr, f"bash cannot run {line!r} as pasted: {r.stderr}"
    return r.stdout.split("\0")[:-1]


def _script_args(words: list[str]) -> tuple[str, list[str]]:
    index = next(i for i, w in enumerate(words) if w.rsplit("/", 1)[-1] in SCRIPTS)
    return words[index].rsplit("/", 1)[-1], words[index + 1 :]


def _sweep_variants(overrides: list[str]) -> list[list[str]]:
    """`-m key=a,b` -> one plain override list per swept value (the other sweeps at their first value)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    variants = [[]]
    for text, o in zip(overrides, parsed, strict=True):
        if not o.is_sweep_override():
            variants = [v + [text] for v in variants]
            continue
        values = [str(v) for v in o.sweep_string_iterator()]
        variants = [
            v + [f"{o.get_key_element()}={values[i]}"] for v, i in itertools.product(variants, range(len(values)))
        ][: len(variants) * len(values)]
    return variants


def compose_command(script: str, args: list[str]) -> list:
    """Compose the config as the script would: its argv rewrite, then Hydra, then the typed schema."""
    from cli.entry import prepare_overrides

    from hydra import compose, initialize_config_dir

    from cli.hydra_setup import legacy_experiment_override, register_resolvers
    from hf_export.config import register_export_config
    from inference.config import register_configs as register_inference
    from playground.config import register_configs as register_serve
    from training.settings.config import register_configs as register_training

    register_resolvers()
    register_training(), register_inference(), register_serve(), register_export_config()
    args = legacy_experiment_override(prepare_overrides(args))
    flags = {a for a in args if a.startswith("-")}
    assert flags <= {"-m", "--multirun", "--cfg", "job", "--help"}, flags
    overrides = [a for a in args if not a.startswith("-") and a != "job"]
    variants = _sweep_variants(overrides) if flags & {"-m", "--multirun"} else [overrides]
    composed = []
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        for variant in variants:
            cfg = compose(config_name=SCRIPTS[script], overrides=variant, return_hydra_config=True)
            OmegaConf.resolve(cfg.hydra.run)  # the run folder's name, from these overrides
            with open_dict(cfg):
                del cfg["hydra"]
            composed.append(OmegaConf.to_object(cfg))
    return composed


def test_the_readmes_show_commands_of_every_entry_script():
    scripts = {COMMAND.match(line).group(1) + ".py" for _, line, _ in COMMANDS if COMMAND.match(line)}
    assert {"train.py", "generate.py", "evaluate.py"} <= scripts
    assert len(COMMANDS) >= 40
    assert any("experiment=" in line for _, line, _ in COMMANDS)
    assert any("~/" in line or "$HOME/" in line for _, line, _ in COMMANDS)  # a path in the home folder


@pytest.mark.parametrize("readme,line,refused", COMMANDS, ids=[f"{r}:{i}" for i, (r, *_) in enumerate(COMMANDS)])
def test_every_readme_command_is_accepted_as_pasted(readme, line, refused, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    script, args = _script_args(_bash_words(line, tmp_path))
    if "--help" in args or refused:
        return  # --help composes nothing (tests/cli/test_first_hour.py runs it); a mistake shown on purpose
    try:
        configs = compose_command(script, args)
    except Exception as e:  # noqa: BLE001 - the message names the command that failed
        pytest.fail(f"{readme}: {line!r} is refused: {type(e).__name__}: {str(e).splitlines()[0]}")
    for cfg in configs:
        path = getattr(getattr(cfg, "data", None), "path", None) or ""
        assert "~" not in path and "$HOME" not in path, f"{line!r}: the home folder was not expanded: {path}"


# Every bash block, line by line: valid bash, and a command this file knows how to check.
# Tools that are not the project's: their lines are only checked to parse as bash.
OTHER_TOOLS = (
    (".",),
    ("python3", "-m", "venv"),
    ("pip", "install"),
    ("python", "-m", "pytest"),
    ("python", "-m", "tensorboard.main"),
    ("tensorboard",),
    ("curl",),
    ("cd",),
    ("sha256sum",),
)


def bash_blocks() -> list[tuple[str, str]]:
    return [
        (name, body)
        for name in PAGES
        for lang, body in FENCED.findall((ROOT / name).read_text(encoding="utf-8"))
        if lang == "bash"
    ]


def bash_commands() -> list[tuple[str, list[str]]]:
    """(page, words) for every simple command of every bash block: comments dropped, `a && b` split."""
    found = []
    for name, body in bash_blocks():
        for line in _logical_lines(body):
            words = shlex.split(line, comments=True)
            command: list[str] = []
            for w in [*words, "&&"]:
                if w in ("&&", "||", ";", "|"):
                    found += [(name, command)] if command else []
                    command = []
                else:
                    command.append(w)
    return found


BASH_BLOCKS = bash_blocks()
BASH_COMMANDS = bash_commands()


def test_the_pages_show_bash_for_every_tool_we_check():
    assert len(BASH_BLOCKS) >= 30
    firsts = {tuple(words[:3]) for _, words in BASH_COMMANDS}
    assert {("python", "-m", "data.prepare"), ("python", "bench.py", "--quick")} <= firsts
    assert any(words[0] == "make" for _, words in BASH_COMMANDS)
    assert any(words[:2] == ["python", "benchmarks/time_budget.py"] for _, words in BASH_COMMANDS)


@pytest.mark.parametrize("page,block", BASH_BLOCKS, ids=[f"{p}:{i}" for i, (p, _) in enumerate(BASH_BLOCKS)])
def test_every_bash_block_parses_as_bash(page, block):
    r = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and not r.stderr, f"{page}: bash cannot parse this block: {r.stderr}\n{block}"


def _check_make(words: list[str]) -> None:
    from tests.cli.test_makefile import defined_targets

    makefile = (ROOT / "Makefile").read_text()
    for w in words[1:]:
        if re.match(r"[A-Z_]+=", w):
            assert re.search(rf"^{w.split('=')[0]}\s*\?=", makefile, re.M), f"make has no variable {w}"
        else:
            assert w in defined_targets(), f"make has no target {w!r}"


def _check_prepare(args: list[str]) -> None:
    from data.prepare.__main__ import _parse
    from data.prepare.fetching import REGISTRY

    parsed = _parse(args)  # argparse exits (SystemExit) on an unknown flag
    assert parsed.list or parsed.name in REGISTRY, args


def _check_time_budget(args: list[str]) -> None:
    """Its flags parse (the corpus is the user's file), and every `--run` composes as train.py arguments."""
    from benchmarks.time_budget import parse_args

    with mock.patch("pathlib.Path.is_file", return_value=True):
        parsed = parse_args(args)
    for spec in parsed.run:
        overrides = spec.partition("=")[2].split()
        compose_command(
            "train.py",
            [
                f"data.path={parsed.corpus}",
                f"train.max_seconds={parsed.seconds}",
                "train.max_steps=1000000",
                "train.overwrite=true",
                *overrides,
            ],
        )


CAMPAIGNS = (
    "benchmarks.ladder",
    "benchmarks.finetune",
    "benchmarks.corpus_start",
    "benchmarks.hangul_compare",
    "benchmarks.reader_start",
    "benchmarks.gpu_check",
    "benchmarks.hangul_stages",
)


def _check_campaign(module: str, args: list[str]) -> None:
    """A benchmark campaign's flags parse (the corpora are the user's files) and its --set composes."""
    import importlib

    with mock.patch("pathlib.Path.is_file", return_value=True):
        parsed = importlib.import_module(module).parse_args(args)
    if getattr(parsed, "set", ""):
        compose_command("train.py", ["data.path=/tmp/corpus.txt", *parsed.set.split()])


@pytest.mark.parametrize("page,words", BASH_COMMANDS, ids=[f"{p}:{i}" for i, (p, _) in enumerate(BASH_COMMANDS)])
def test_every_bash_command_is_one_we_check(page, words):
    from benchmarks.options import parse_options

    line = shlex.join(words)
    if any(w.rsplit("/", 1)[-1] in SCRIPTS for w in words) and words[0] in ("python", "python3", "torchrun"):
        # An entry script: COMMANDS holds it, and test_every_readme_command_is_accepted_as_pasted composes it.
        assert COMMAND.match(line), f"{page}: {line!r} runs an entry script in a way COMMAND does not find"
    elif words[0] == "make":
        _check_make(words)
    elif words[:3] == ["python", "-m", "data.prepare"]:
        _check_prepare(words[3:])
    elif words[:2] == ["python", "bench.py"]:
        parse_options(words[2:])
    elif words[:2] == ["python", "benchmarks/time_budget.py"]:
        _check_time_budget(words[2:])
    elif words[:3] == ["python", "-m", "benchmarks.time_budget"]:
        _check_time_budget(words[3:])
    elif words[:2] == ["python", "-m"] and words[2] in CAMPAIGNS:
        _check_campaign(words[2], words[3:])
    elif words[:3] == ["python", "-m", "benchmarks.dropout_speed"]:
        from benchmarks.dropout_speed import parse_args

        parse_args(words[3:])
    elif words[:3] == ["python", "-m", "benchmarks.row_scores"]:
        from benchmarks.row_scores import parse_args

        parse_args(words[3:])
    elif words[:2] == ["python", "benchmarks/serve_stress.py"]:
        from benchmarks.serve_stress import parse_args

        parse_args(words[2:])  # argparse exits (SystemExit) on an unknown flag
    else:
        assert any(tuple(words[: len(t)]) == t for t in OTHER_TOOLS), (
            f"{page}: {line!r} runs a command this test does not know; check it here, or add the tool to OTHER_TOOLS"
        )
