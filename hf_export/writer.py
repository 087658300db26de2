"""Writing an exported folder: the layout chosen, the weights mapped, every file written, then moved into place.

Design choices:
- The tokenizer, `char` and `hangul`: a WordLevel model over single characters with an NFC normaliser (NFD and NFKC
  change Hangul); id 0 is U+FFFD, what our `<unk>` decodes to (a vocabulary holding U+FFFD keeps `<unk>`). `jamo`
  makes three tokens of a character, which WordLevel cannot: the folder ships hf_code/tokenization_kochar.py
  (docs/en/export.md, "The tokenizer").
- Before the folder gets its name, `transformers` loads it as a user would, beside the run's model on one fixed
  window: a mapping mistake moves logits by whole units, float32 kernels by far less than `TOLERANCE`. Weights whose
  own logits are not finite are refused: not export's fault.
- The README.md card says what the model is, in Korean and English: every fact comes from the run's records (the
  corpus license from data.prepare's SOURCE.txt), never from guesses; a damaged record never stops an export (the card
  says so), and names not valid UTF-8 show U+FFFD.
"""

from __future__ import annotations

import json
import math
import shlex
import shutil
from pathlib import Path

import torch

from common.errors import UserError, os_error_cause
from common.names import shown_name
from hf_export import destination
from hf_export.plain import plain_model
from hf_format import FORMAT, LAYOUTS, RECORD, VERSION, custom, gpt2, llama
from hf_format.deps import require
from inference.checkpoint import Checkpoint, another_checkpoint
from inference.loading import model_from_checkpoint
from inference.weights import held_weights
from model import AttentionLanguageModel
from model.config import ModelConfig
from tokenizer import Tokenizer

CODE = Path(__file__).resolve().parent / "hf_code"  # the code a jamo tokenizer's or a custom model's folder ships
UNK_SHOWN = "\ufffd"
TOLERANCE = 1e-3
WINDOW = 64


def choose_layout(c: ModelConfig) -> str:
    return "gpt2" if gpt2.fits(c) else "llama" if llama.fits(c) else "custom"


def record(ckpt: Checkpoint, layout: str, exported: ModelConfig) -> dict:
    """kochar.json: what our scripts need to rebuild the exact model (`trained_as`: before plain.py's folding),
    which weights it holds, and of which checkpoint (`source`)."""
    held = held_weights(ckpt)
    return {
        "format": FORMAT,
        "version": VERSION,
        "layout": layout,
        "model_config": exported.to_dict(),
        "trained_as": ckpt.model_config.to_dict(),
        "tokenizer": ckpt.tokenizer,
        "tokens_per_char": float(ckpt.tokens_per_char),
        "step": ckpt.step,
        "config": ckpt.config,
        "weights": held.kind,
        "average_updates": held.updates,
        "source": ckpt.source,
    }


def _write_json(path: Path, data: dict) -> None:
    # A name that is not valid UTF-8 (lone surrogates) becomes the JSON escape \udcXX, so it reads back intact.
    path.write_bytes((json.dumps(data, ensure_ascii=False, indent=2) + "\n").encode("utf-8", "backslashreplace"))


def _write_files(
    tmp: Path, ckpt: Checkpoint, tokenizer, params: int, layout: str, state: dict, c: ModelConfig, export_command: str
) -> None:
    """Every file of the folder into `tmp`; kochar.json last, listing them (what overwrite=true may replace)."""
    module = LAYOUTS[layout]
    tensors = {k: v.contiguous() for k, v in module.to_hf(state, c).items()}
    require("safetensors.torch").save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    _write_json(tmp / "config.json", {**module.hf_config(c), "torch_dtype": "float32"})
    _write_json(
        tmp / "generation_config.json",
        {"do_sample": True, "temperature": 0.8, "pad_token_id": 0, "max_length": c.context_length},
    )
    if layout == "custom":
        for name in custom.FILES:
            shutil.copyfile(CODE / name, tmp / name)
    write_tokenizer(tokenizer, tmp, c.context_length)
    (tmp / "README.md").write_text(model_card(ckpt, params, layout, export_command), encoding="utf-8")
    _write_json(tmp / RECORD, {**record(ckpt, layout, c), "files": sorted(p.name for p in tmp.iterdir()) + [RECORD]})


def write_folder(
    ckpt: Checkpoint, tokenizer, params: int, out: Path, export_command: str, overwrite: bool, verify: bool = True
) -> str:
    """Export `ckpt` to `out` (with `verify`, named only once `transformers` gives the run's logits); the layout."""
    require("safetensors.torch")
    out = destination.checked_destination(out.expanduser(), ckpt.path, overwrite)
    state, c = plain_model(ckpt.model, ckpt.model_config, lambda c: choose_layout(c) != "custom")
    layout = choose_layout(c)
    destination.remove_stale(out.parent)
    with destination.export_lock(out), destination.temporary_folder(out) as tmp:
        try:
            _write_files(tmp, ckpt, tokenizer, params, layout, state, c, export_command)
        except Exception as e:  # noqa: BLE001 - safetensors and transformers report a full disk in their own types
            if not isinstance(e, OSError) and "os error" not in str(e):
                raise
            raise destination.fault("write the export beside", out, e) from None
        if verify:
            try:
                check_folder(tmp, model_from_checkpoint(ckpt), ckpt.path)
            except OSError as e:  # transformers copies a folder's code into its own cache (HF_HOME) to load it
                raise destination.fault("load the export with transformers from", tmp, e) from None
        destination.commit(tmp, out, overwrite)
    return layout


def _char_tokenizer(chars: list[str]):
    tk = require("tokenizers")
    unk = "<unk>" if UNK_SHOWN in chars else UNK_SHOWN
    vocab = {unk: 0} | {c: i + 1 for i, c in enumerate(chars)}
    tok = tk.Tokenizer(tk.models.WordLevel(vocab, unk_token=unk))
    tok.normalizer = tk.normalizers.NFC()
    tok.pre_tokenizer = tk.pre_tokenizers.Split(tk.Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = tk.decoders.Fuse()
    return tok, unk


def write_tokenizer(tokenizer: Tokenizer, out: Path, context_length: int) -> None:
    if tokenizer.kind in ("char", "hangul"):  # one token per character: a WordLevel model expresses both
        transformers = require("transformers")
        tok, unk = _char_tokenizer(tokenizer.chars)
        fast = transformers.PreTrainedTokenizerFast(
            tokenizer_object=tok, unk_token=unk, model_max_length=context_length, clean_up_tokenization_spaces=False
        )
        fast.save_pretrained(str(out))
    else:
        unk = "<unk>"
        shutil.copy(CODE / "tokenization_kochar.py", out / "tokenization_kochar.py")
        vocab = {"tokens": tokenizer.tokens}  # in id order after <unk>, characters added by fine-tuning included
        (out / "kochar_vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        config = {
            "tokenizer_class": "KocharJamoTokenizer",
            "unk_token": unk,
            "model_max_length": context_length,
            "auto_map": {"AutoTokenizer": ["tokenization_kochar.KocharJamoTokenizer", None]},
            "clean_up_tokenization_spaces": False,
        }
        _write_json(out / "tokenizer_config.json", config)
    if not (out / "special_tokens_map.json").is_file():
        _write_json(out / "special_tokens_map.json", {"unk_token": unk})


@torch.no_grad()
def check_folder(folder: Path, model: AttentionLanguageModel, source: object = "the run") -> float:
    """The largest logit difference between `transformers` on `folder` and `model`; UserError above TOLERANCE."""
    c = model.config
    ids = torch.randint(0, c.vocab_size, (1, min(WINDOW, c.context_length)), generator=torch.Generator().manual_seed(0))
    ours = model.eval()(ids)[0]
    if not bool(torch.isfinite(ours).all()):
        raise UserError(
            f"the weights of {source} compute logits that are not finite numbers (NaN or infinity): "
            "they cannot be exported; nothing was written; "
            f"{another_checkpoint(source if isinstance(source, Path) else None)}"
        )
    transformers = require("transformers")
    transformers.utils.logging.set_verbosity_error()  # export prints its own one line: no bars, no warnings
    transformers.utils.logging.disable_progress_bar()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(folder), trust_remote_code=True).eval()
    diff = float((ours - theirs(ids).logits.float()).abs().max())
    if not diff <= TOLERANCE:  # NaN refuses too
        raise UserError(
            f"the exported folder does not compute what the run computes (logits differ by {diff:.3g} "
            f"through {type(theirs).__name__}); nothing was written: please report it"
        )
    return diff


def corpus_license(data_path: str | None) -> str | None:
    """The `License:` line of the SOURCE.txt beside the corpus, or None; an unreadable one is said, never raised."""
    if not data_path or not isinstance(data_path, str):
        return None
    p = Path(data_path).expanduser()
    for folder in (p, p.parent, p.parent.parent):
        source = folder / "SOURCE.txt"
        try:
            if not source.is_file():
                continue
            with source.open(encoding="utf-8", errors="replace") as f:
                lines = f.read(1 << 16).splitlines()  # a license line is near the top; never read a huge file
        except OSError:
            return f"unknown: {shown_name(str(source))} could not be read"
        for line in lines:
            if line.startswith("License:"):
                return shown_name(line.removeprefix("License:").strip())[:200]
    return None


def training_command(ckpt: Checkpoint) -> str:
    """The run's `python train.py ...` from its `.hydra/overrides.yaml`, or why it is not known."""
    overrides = ckpt.path.parent / ".hydra" / "overrides.yaml" if ckpt.path else None
    if not overrides or not overrides.is_file():
        return "(not recorded: the checkpoint's run folder has no .hydra/overrides.yaml)"
    import yaml

    try:
        if overrides.stat().st_size > 1 << 20:
            raise ValueError("larger than 1 MiB")
        args = yaml.safe_load(overrides.read_text(encoding="utf-8")) or []
        if not isinstance(args, list) or not all(isinstance(a, str | int | float | bool) for a in args):
            raise ValueError("not a list of overrides")
    except (OSError, ValueError, yaml.YAMLError) as e:  # UnicodeDecodeError is a ValueError
        why = type(e).__name__ if isinstance(e, yaml.YAMLError) else os_error_cause(e)
        return f"(not known: the run's .hydra/overrides.yaml could not be read: {why})"
    return shown_name("python train.py " + " ".join(shlex.quote(str(a)) for a in args))


def weights_words(ckpt: Checkpoint) -> str:
    """Which of the run's weights the folder holds, in English and Korean."""
    used = held_weights(ckpt)
    korean = {"averaged": "학습 중 평균 낸 가중치", "raw": "평균 내지 않은 원래 가중치"}.get(used.kind, "기록되지 않음")
    count = f", 갱신 {used.updates}회" if used.updates is not None else ""
    return f"{used.words()} / {korean}{count}"


def source_words(source: dict) -> str:
    """Which checkpoint the folder came from and why that one, in English and Korean."""
    note = source.get("note")  # why best.pt was passed over
    why = {
        "best": "the best validation of the run / 실행에서 검증 손실이 가장 낮았던 가중치",
        "last": f"the run's last weights / 마지막 가중치: {note}"
        if note
        else "the run's last weights, also its best / 마지막 가중치이자 가장 좋은 가중치",
        "named": "the file named on the command line / 명령줄에서 지정한 파일",
    }.get(source.get("chosen"), "")
    loss = source.get("val_loss")
    loss = f", val loss / 검증 손실 {loss:.4f}" if isinstance(loss, float) else ""
    return f"`{source.get('checkpoint')}` (step / 스텝 {source.get('step')}{loss}; {why})"


def provenance(ckpt: Checkpoint, config: dict, layout: str) -> str:
    """The card's lines on where the weights come from: the run fine-tuned from, which set, which checkpoint."""
    start = config.get("init_from") if isinstance(config.get("init_from"), dict) else {}
    lines = f"\n- Fine-tuned from / 미세 조정 출발점: `{shown_name(str(start['from']))}`" if start.get("from") else ""
    lines += f"\n- Weights / 가중치: {weights_words(ckpt)}"
    lines += f"\n- Exported from / 내보낸 체크포인트: {source_words(ckpt.source)}" if ckpt.source else ""
    if ckpt.model_config.embedding == "jamo" and layout != "custom":  # hf_export/plain.py folded it, exactly
        lines += (
            "\n- Jamo embedding (`model.embedding=jamo`) folded into the token embedding, exactly / "
            "자모 임베딩을 토큰 임베딩에 그대로 합쳐 넣음"
        )
    return lines


def model_card(ckpt: Checkpoint, params: int, layout: str, export_command: str) -> str:
    c = ckpt.model_config
    config = ckpt.config if isinstance(ckpt.config, dict) else {}
    data = config.get("data") if isinstance(config.get("data"), dict) else {}
    corpus = (
        shown_name(data["path"])
        if isinstance(data.get("path"), str) and data["path"]
        else "the built-in corpus (data/corpus/ko_default.txt)"
    )
    tokenizer = data.get("tokenizer", "char")
    val = ckpt.training.val_loss if ckpt.training and isinstance(ckpt.training.val_loss, float) else float("nan")
    bpc = f"{val * ckpt.tokens_per_char / math.log(2):.3f}" if math.isfinite(val) else "—"
    remote = layout == "custom" or tokenizer == "jamo"
    loader = LAYOUTS[layout].hf_config(c)["architectures"][0]  # the class config.json names
    loader += " (this folder's modeling_kochar.py)" if layout == "custom" else ""
    trust = ", trust_remote_code=True" if remote else ""
    load = (
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        f'model = AutoModelForCausalLM.from_pretrained("<this folder>"{trust})\n'
        f'tok = AutoTokenizer.from_pretrained("<this folder>"{trust})'
    )
    license_line = corpus_license(data.get("path")) or "unknown: the run does not know where its corpus came from"
    started = provenance(ckpt, config, layout)
    return shown_name(f"""# kochar-gpt character model / 문자 단위 한국어 GPT

A character-level Korean GPT trained with kochar-gpt and exported to the Hugging Face
format. 한국어 문자 단위 GPT를 kochar-gpt로 학습해 Hugging Face 형식으로 내보낸 모델입니다.

- Corpus / 말뭉치: `{corpus}` (license / 라이선스: {license_line})
- Recipe / 레시피: `{config.get("recipe", "lecture")}`; tokenizer / 토크나이저: `{tokenizer}`
- Size / 크기: {params:,} parameters, {c.num_blocks} blocks, width {c.embedding_size}, {c.num_heads} heads,
  context {c.context_length} tokens (position {c.position}, norm {c.norm}, MLP {c.mlp}, query/key norm {c.qk_norm})
- Steps / 학습 스텝: {ckpt.step:,}; validation bits per character / 검증 문자당 비트: {bpc}{started}
- Loads as / 불러오는 클래스: {loader}{" with trust_remote_code=True" if remote else ""}

```python
{load}
```

Trained with / 학습 명령:

```bash
{training_command(ckpt)}
```

Exported with / 내보내기 명령:

```bash
{export_command}
```

`python generate.py ckpt=<this folder>` and `python evaluate.py ckpt=<this folder> data.path=...` in kochar-gpt
read the folder too, and give the same text for the same seed as the run it came from.
kochar-gpt의 `generate.py`와 `evaluate.py`도 이 폴더를 `ckpt=`로 읽으며, 같은 시드에서 원래 실행과 같은 글을 냅니다.
""")
