"""A Hangul syllable's probability split into its three spelling stages, for the playground's hover.

Design choices:
- The hangul ids 1..11172 are the syllables in code-point order: one reshape to (19, 21, 28) and two sums give all.
- Letters are compatibility jamo (ㄱ, ㅏ, ㄴ), which read standalone; conjoining jamo render oddly alone."""

from __future__ import annotations

from torch import Tensor

from model.hangul.jamo_embedding import FIRST_ID, NUM_FINALS, NUM_INITIALS, NUM_MEDIALS, NUM_SYLLABLES

INITIALS = "ㄱㄲㄴㄷㄸㄹㅁㅂㅃㅅㅆㅇㅈㅉㅊㅋㅌㅍㅎ"
MEDIALS = "ㅏㅐㅑㅒㅓㅔㅕㅖㅗㅘㅙㅚㅛㅜㅝㅞㅟㅠㅡㅢㅣ"
FINALS = [""] + list("ㄱㄲㄳㄴㄵㄶㄷㄹㄺㄻㄼㄽㄾㄿㅀㅁㅂㅄㅅㅆㅇㅈㅊㅋㅌㅍㅎ")


def is_syllable_id(token_id: int) -> bool:
    return FIRST_ID <= token_id < FIRST_ID + NUM_SYLLABLES


def syllable_stages(probs: Tensor, token_id: int) -> list[dict]:
    """[{"initial", "p"}, {"medial", "p"}, {"final", "p"}] of syllable `token_id`, multiplying to probs[token_id]."""
    grid = probs[FIRST_ID : FIRST_ID + NUM_SYLLABLES].double().reshape(NUM_INITIALS, NUM_MEDIALS, NUM_FINALS)
    i, rest = divmod(token_id - FIRST_ID, NUM_MEDIALS * NUM_FINALS)
    m, f = divmod(rest, NUM_FINALS)
    pair = grid[i, m].sum()  # p(initial, medial)
    p_initial = grid[i].sum()
    # Doubles, so the quotients multiply back to the syllable's probability to well within float32's rounding.
    p_medial = pair / p_initial if p_initial > 0 else pair.new_zeros(())  # 0 only for a syllable top-k/p never draws
    p_final = grid[i, m, f] / pair if pair > 0 else pair.new_zeros(())
    # A stage that holds all of top-k's mass sums float32 probabilities to a hair over 1: it is 1.
    return [
        {"initial": INITIALS[i], "p": min(1.0, float(p_initial))},
        {"medial": MEDIALS[m], "p": min(1.0, float(p_medial))},
        {"final": FINALS[f], "p": min(1.0, float(p_final))},
    ]
