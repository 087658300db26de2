"""kochar-gpt's jamo tokenizer for `transformers` (`trust_remote_code=True`), self-contained.

A Hangul syllable is three tokens (initial, medial, final or `<T none>`), any other character one, after NFC;
`kochar_vocab.json` lists them in id order after `<unk>` (id 0). A part with no syllable shows as its compatibility
jamo, as the project's own decoder shows it."""

import json
import os
import unicodedata

from transformers import PreTrainedTokenizer

FIRST, LAST = 0xAC00, 0xD7A3
N_L, N_V, N_T = 19, 21, 28
UNK, UNK_SHOWN = "<unk>", "\ufffd"


def _parts():
    names, shown = [], {}
    for base, count, kind, prefix in (
        (0x1100, N_L, "L", "HANGUL CHOSEONG "),
        (0x1161, N_V, "V", "HANGUL JUNGSEONG "),
        (0x11A7, N_T, "T", "HANGUL JONGSEONG "),
    ):
        for k in range(count):
            if kind == "T" and k == 0:
                names.append("<T none>")
                shown["<T none>"] = ""
                continue
            jamo = chr(base + k)
            name = f"<{kind} {jamo}>"
            names.append(name)
            shown[name] = unicodedata.lookup("HANGUL LETTER " + unicodedata.name(jamo).removeprefix(prefix))
    return names[:N_L], names[N_L : N_L + N_V], names[N_L + N_V :], shown


INITIALS, MEDIALS, FINALS, SHOWN = _parts()


class KocharJamoTokenizer(PreTrainedTokenizer):
    vocab_files_names = {"vocab_file": "kochar_vocab.json"}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab_file, unk_token=UNK, **kwargs):
        with open(vocab_file, encoding="utf-8") as f:
            d = json.load(f)
        self.names = [UNK] + list(d["tokens"]) + list(d.get("added", []))
        self.ids = {name: i for i, name in enumerate(self.names)}
        super().__init__(unk_token=unk_token, **kwargs)

    @property
    def vocab_size(self):
        return len(self.names)

    def get_vocab(self):
        return dict(self.ids)

    def _tokenize(self, text, **kwargs):
        out = []
        for ch in unicodedata.normalize("NFC", text):
            s = ord(ch) - FIRST
            if 0 <= s <= LAST - FIRST:
                out += [INITIALS[s // (N_V * N_T)], MEDIALS[(s // N_T) % N_V], FINALS[s % N_T]]
            else:
                out.append(ch)
        return out

    def _convert_token_to_id(self, token):
        return self.ids.get(token, 0)

    def _convert_id_to_token(self, index):
        return self.names[index]

    def convert_tokens_to_string(self, tokens):
        out, i = [], 0
        while i < len(tokens):
            t = tokens[i]
            if t in INITIALS and i + 1 < len(tokens) and tokens[i + 1] in MEDIALS:
                closed = i + 2 < len(tokens) and tokens[i + 2] in FINALS
                final = FINALS.index(tokens[i + 2]) if closed else 0
                out.append(chr(FIRST + (INITIALS.index(t) * N_V + MEDIALS.index(tokens[i + 1])) * N_T + final))
                i += 3 if closed else 2
                continue
            out.append(UNK_SHOWN if t == UNK else SHOWN.get(t, t))
            i += 1
        return "".join(out)

    def save_vocabulary(self, save_directory, filename_prefix=None):
        path = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + "kochar_vocab.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"tokens": self.names[1:]}, f, ensure_ascii=False)
        return (path,)
