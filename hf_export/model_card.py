"""The exported folder's README.md: what the model is, in Korean and English, from what the run recorded.

Design choices:
- Every fact comes from the run's records (the corpus license from data.prepare's SOURCE.txt), never from guesses;
  a damaged record never stops an export (the card says so), and names not valid UTF-8 show U+FFFD.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path

from common.errors import os_error_cause
from common.names import shown_name
from inference.checkpoint import Checkpoint
from inference.weights import held_weights

LOADERS = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "custom": "KocharForCausalLM (this folder's modeling_kochar.py)",
}


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
- Loads as / 불러오는 클래스: {LOADERS[layout]}{" with trust_remote_code=True" if remote else ""}

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
