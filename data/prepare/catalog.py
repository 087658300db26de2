"""The corpora `python -m data.prepare` knows: where each file lives, what it must hold, how to read it.

Design choices:
- Every source is pinned to one commit, so its bytes (and recorded checksums) never change under us.
- `extract` turns a downloaded file into its plain text, or raises `BadContent`: nothing is trusted before that.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from data.download import BadContent


@dataclass(frozen=True)
class RemoteFile:
    path: str  # relative to the source's base URL; also where it is kept under the cache
    sha256: str | None = None  # None: recorded on the first download that validates


@dataclass(frozen=True)
class CorpusSource:
    name: str
    description: str
    license: str
    citation: str
    base_url: str
    files: tuple[RemoteFile, ...]
    extract: Callable[[str, str], str]  # (file path, file text) -> the plain text it holds; BadContent if not
    output: str  # name of the prepared text file
    separator: str = "\n\n"  # between the texts of two files (a blank line between two novels)
    documents: bool = True  # each file is one document: `--files` writes them one file each
    max_file_mb: float = 32  # a file larger than this is not the corpus's (an endless or wrong body): refused


def _koconovel_text(path: str, raw: str) -> str:
    """A KoCoNovel text.jsonl: one {"doc_id", "text"} object per line, in reading order."""
    parts = []
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            if not isinstance(doc["text"], str):
                raise TypeError("its text is not a string")
            parts.append(doc["text"].strip("\n"))
        except (ValueError, KeyError, TypeError) as e:
            raise BadContent(f"{path} line {n} is not a KoCoNovel text record ({type(e).__name__}: {e})") from None
    if not parts:
        raise BadContent(f"{path} holds no KoCoNovel text record")
    return "\n".join(parts)


# The 50 novels in the corpus's own order (list_of_novels.csv), at the commit that added the text.jsonl files.
_KOCONOVEL_NOVELS = (
    "1_Ms._B_and_Love_Letters",
    "2_A_Sweetheart",
    "3_A_Fictional_Rogue_Girl",
    "4_Wedding",
    "5_Kyung-hee",
    "6_A_Strange_Monk",
    "7_The_Woman",
    "8_Dark_Moon",
    "9_A_Field_of_Beans_Where_Gold_is_Buried",
    "10_Rich_Mine",
    "11_The_Daedong_River_Whispers",
    "12_City_and_Ghost",
    "13_Ddaraji",
    "14_Manmubang",
    "15_When_the_Sun_Rises",
    "16_When_Buckwheat_Flowers_Blossom",
    "17_Good_Sentences",
    "18_The_Unknown_Woman",
    "19_The_Mother_and_the_Son",
    "20_Anemone",
    "21_The_Death_of_Park_Chum-ji",
    "22_The_Mute_Samurai",
    "23_Spring_Spring",
    "24_The_Father_and_the_Son",
    "25_Fire",
    "26_A_Poverty-Stricken_Wife",
    "27_The_Son-in-Law",
    "28_A_Boy_s_Woes",
    "29_The_Calf",
    "30_Purehearted_Prince_Hodong",
    "31_Society_Authorizing_Alcohol",
    "32_The_Newspaper_and_the_Cage",
    "33_Miracles_of_Coincidence",
    "34_A_Lucky_Day",
    "35_Enemies_to_Benefactors",
    "36_Presence",
    "37_Girl_of_Doubt",
    "38_Eisig_and_Doseung",
    "39_The_Rose_is_Diseased",
    "40_Passionate_Princess_Nangnang",
    "41_Jeong-hee",
    "42_Youth",
    "43_The_Bachelor_and_the_Blind_Eel",
    "44_Escape_Chronicles",
    "45_Break_at_Dawn",
    "46_Sunrise",
    "47_Floral_Tribute",
    "48_The_Bull_and_the_Goblin",
    "49_Later_Baekje_Chronicles",
    "50_Baptism_of_Soil",
)

KOCONOVEL = CorpusSource(
    name="koconovel",
    description="KoCoNovel: 50 Korean novels and short stories of the 1910s-1930s (public domain, from Korean "
    "Wikisource, spelling modernised), one sentence per line, a blank line between novels",
    license="CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/)",
    citation='Kyuhee Kim, Surin Lee and Sangah Lee (2024), "KoCoNovel: Annotated Dataset of Character '
    'Coreference in Korean Novels", arXiv:2404.01140. https://github.com/storidient/KoCoNovel',
    base_url="https://raw.githubusercontent.com/storidient/KoCoNovel/806e3f0f0c1df80c5ba28bdd9f25804d04f41933/",
    files=tuple(RemoteFile(f"data/jsonl/{novel}/text.jsonl") for novel in _KOCONOVEL_NOVELS),
    extract=_koconovel_text,
    output="koconovel.txt",
)

NSMC_HEADER = "id\tdocument\tlabel"


def _nsmc_text(path: str, raw: str) -> str:
    """NSMC's ratings.txt: a header, then `id<TAB>document<TAB>label` rows -> one review per line, whitespace
    folded, empty reviews and exact duplicates (after folding) dropped, in the file's order."""
    lines = raw.splitlines()
    if not lines or lines[0].strip() != NSMC_HEADER:
        raise BadContent(f"{path} does not start with NSMC's header line (id, document, label separated by tabs)")
    seen: set[str] = set()
    reviews = []
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 3 or not fields[0].strip().isdigit() or fields[-1].strip() not in ("0", "1"):
            raise BadContent(f"{path} line {n} is not an NSMC row (id, review, label 0 or 1, separated by tabs)")
        review = unicodedata.normalize("NFC", " ".join("\t".join(fields[1:-1]).split()))
        if review and review not in seen:
            seen.add(review)
            reviews.append(review)
    if not reviews:
        raise BadContent(f"{path} holds no review")
    return "\n".join(reviews)


NSMC = CorpusSource(
    name="nsmc",
    description="Naver Sentiment Movie Corpus v1.0: about 200,000 Korean movie reviews (informal, with "
    "emoticons and jamo-only laughter), one review per line, duplicates dropped",
    license="CC0 1.0 (https://creativecommons.org/publicdomain/zero/1.0/)",
    citation="Lucy Park (2016), Naver Sentiment Movie Corpus v1.0. https://github.com/e9t/nsmc",
    base_url="https://raw.githubusercontent.com/e9t/nsmc/e25115d10dc8eb9f9ea8b42b750ca13832deed57/",
    files=(RemoteFile("ratings.txt"),),
    extract=_nsmc_text,
    output="nsmc.txt",
    separator="\n",
    max_file_mb=128,  # ratings.txt is about 19 MB
    documents=False,
)

REGISTRY: dict[str, CorpusSource] = {s.name: s for s in (KOCONOVEL, NSMC)}
