"""`--help` for the Hydra entry scripts: each script's own keys, with their defaults and one-line meanings.

Design choices:
- Each script's YAML sets `hydra.help.template: ${script_help:}`, as Hydra's default lists every config group.
- Defaults come from the composed config, meanings from the YAML's `# comments` (one text to keep up to date)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
HIDDEN = frozenset({"model.vocab_size"})  # set from the tokenizer, never by the user


def _comment(rest: str) -> str:
    """The `# comment` after a YAML value, skipping a `#` inside quotes."""
    quote = ""
    for i, ch in enumerate(rest):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or rest[i - 1].isspace()):
            return rest[i + 1 :].strip()
    return ""


def yaml_comments(path: Path, prefix: str = "") -> dict[str, str]:
    """{dotted key: the comment on its line} for a simple block-style YAML file like ours."""
    lines = path.read_text(encoding="utf-8").splitlines()
    package = next((ln.split("@package", 1)[1].strip() for ln in lines[:3] if "@package" in ln), None)
    if package is not None:
        prefix = "" if package == "_global_" else package
    stack: list[tuple[int, str]] = [(-1, prefix)]
    out: dict[str, str] = {}
    for n, line in enumerate(lines):
        stripped = line.lstrip()
        if not stripped or stripped.startswith(("#", "-")) or ":" not in stripped:
            continue
        indent = len(line) - len(stripped)
        key, _, rest = stripped.partition(":")
        while stack[-1][0] >= indent:
            stack.pop()
        full = f"{stack[-1][1]}.{key}".lstrip(".")
        stack.append((indent, full))
        comment = _comment(rest)
        if n + 1 < len(lines) and lines[n + 1].lstrip().startswith("#") and ". " in comment:
            comment = comment[: comment.rindex(". ") + 1]  # it goes on below: keep its whole sentences
        if comment and full not in out:
            out[full] = comment
    return out


def config_comments(config_dir: Path, config_name: str) -> dict[str, str]:
    """Meanings of every key: the script's own YAML first, then each config group's files."""
    out = yaml_comments(config_dir / f"{config_name}.yaml")
    for group in sorted(p for p in config_dir.iterdir() if p.is_dir() and p.name != "experiment"):
        for option in sorted(group.glob("*.yaml")):
            for key, text in yaml_comments(option, group.name).items():
                out.setdefault(key, text)
    return out


def _leaves(node: DictConfig, prefix: str = "") -> Iterator[tuple[str, object]]:
    for key in node.keys():
        full = f"{prefix}{key}"
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            yield from _leaves(child, full + ".")
            continue
        try:
            value = OmegaConf.to_container(child, resolve=True) if isinstance(child, ListConfig) else node[key]
        except Exception:  # noqa: BLE001 - an interpolation that cannot resolve yet: show it as written
            value = child._value()
        yield full, value


def _shown(value: object) -> str:
    """A default as YAML reads it: null, true and lists as JSON spells them, '' for the empty text."""
    if value is None or isinstance(value, bool | list | dict):
        return json.dumps(value, ensure_ascii=False)
    return "''" if value == "" else str(value)


def render_help(root: DictConfig, comments: dict[str, str], summary: str, examples: Sequence[str], groups: bool) -> str:
    keys = [(k, _shown(v)) for k, v in _leaves(root) if not k.startswith("hydra.") and k != "hydra" and k not in HIDDEN]
    width = min(44, max(len(f"{k}={v}") for k, v in keys) + 2)
    script = summary.split(":", 1)[0]
    lines = [summary, "", f"Usage: python {script} [key=value ...]", "", "Most common:", *(f"  {e}" for e in examples)]
    if groups:
        lines += ["", "Config groups (group=option):", "$APP_CONFIG_GROUPS"]
    lines += ["", "Keys (key=default, then its meaning):"]
    for key, value in keys:
        pair = f"{key}={value}"
        meaning = comments.get(key, "")
        lines.append(f"  {pair:<{width}}{meaning}".rstrip() if len(pair) < width else f"  {pair}  {meaning}".rstrip())
    lines += [
        "",
        "A ~ or $HOME at the start of a path means your home folder; paths need no quotes beyond what bash "
        "needs. --cfg job prints the composed config"
        + ("; -m key=a,b,c runs a sweep" if groups else "")
        + "; --hydra-help lists Hydra's own options.",
    ]
    return "\n".join(line.replace("$", "$$") if line != "$APP_CONFIG_GROUPS" else line for line in lines)


def register_help(config_name: str, summary: str, examples: Sequence[str], groups: bool = False) -> None:
    """Make `${script_help:}` (the YAML's `hydra.help.template`) render this script's help."""

    def script_help(*, _root_: DictConfig) -> str:
        return render_help(_root_, config_comments(CONFIGS, config_name), summary, examples, groups)

    OmegaConf.register_new_resolver("script_help", script_help, replace=True)
