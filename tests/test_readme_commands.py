"""Every command line the READMEs show is accepted as pasted: bash splits it, the entry script's own argv
rewrite runs, and Hydra composes the config from it (nothing is trained). The READMEs cannot drift from the
code again."""

import itertools
import re
import subprocess

import pytest
from omegaconf import OmegaConf, open_dict

from tests.helpers import ROOT

READMES = ("README.md", "README.ko.md")
SCRIPTS = {"train.py": "train", "generate.py": "generate", "evaluate.py": "evaluate", "serve.py": "serve"}
# A command for one of the entry scripts: `python train.py ...`, `$ python ...`, `torchrun ... train.py ...`.
COMMAND = re.compile(r"^(?:\$ )?(?:python3? |torchrun [^\n]*?)(train|generate|evaluate|serve)\.py\b")


def _inline_commands(text: str) -> list[str]:
    """`python train.py ...` inside backticks in the prose, a line break in the span read as a space."""
    spans = re.findall(r"`(python3? (?:train|generate|evaluate|serve)\.py[^`]*)`", text)
    return [" ".join(s.split()) for s in spans]


def readme_commands() -> list[tuple[str, str]]:
    found = []
    for name in READMES:
        text = (ROOT / name).read_text(encoding="utf-8")
        blocks = [b.splitlines() for b in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL)]
        for block in blocks:
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
    r = subprocess.run(["bash", "-c", "f() { printf '%s\\0' \"$@\"; }; f " + line], capture_output=True, text=True,
                       env={"HOME": str(home), "PATH": "/usr/bin:/bin"}, cwd=home, timeout=30)  # `>` writes there
    assert r.returncode == 0 and not r.stderr, f"bash cannot run {line!r} as pasted: {r.stderr}"
    return r.stdout.split("\0")[:-1]


def _script_args(words: list[str]) -> tuple[str, list[str]]:
    index = next(i for i, w in enumerate(words) if w.rsplit("/", 1)[-1] in SCRIPTS)
    return words[index].rsplit("/", 1)[-1], words[index + 1:]


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
        variants = [v + [f"{o.get_key_element()}={values[i]}"] for v, i in
                    itertools.product(variants, range(len(values)))][:len(variants) * len(values)]
    return variants


def compose_command(script: str, args: list[str]) -> list:
    """Compose the config as the script would: its argv rewrite, then Hydra, then the typed schema."""
    from common.cli import prepare_overrides

    from hydra import compose, initialize_config_dir

    from inference.config import register_configs as register_inference
    from playground.config import register_configs as register_serve
    from training.config import register_configs as register_training
    from training.hydra_setup import legacy_experiment_override, register_resolvers

    register_resolvers()
    register_training(), register_inference(), register_serve()
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
        return  # --help composes nothing (tests/test_first_hour.py runs it); a mistake shown on purpose
    try:
        configs = compose_command(script, args)
    except Exception as e:  # noqa: BLE001 - the message names the command that failed
        pytest.fail(f"{readme}: {line!r} is refused: {type(e).__name__}: {str(e).splitlines()[0]}")
    for cfg in configs:
        path = getattr(getattr(cfg, "data", None), "path", None) or ""
        assert "~" not in path and "$HOME" not in path, f"{line!r}: the home folder was not expanded: {path}"
