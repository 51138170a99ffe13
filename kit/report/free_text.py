"""Free text read from a run (a case's reason and notes), shortened before a report lays it out.

A reason may hold up to 64 KiB (kit.files.regular.TEXT_LIMIT), and the PDF's line breaking is
slow on a long word: a reason of 64,000 characters without a space took 199 s of CPU to print
(the same length in words, about 1 s more than none). So a report shows a text's first SHOWN
characters, each word longer than LONGEST_WORD by its ends, and says the text's length and the
file that holds it whole.
"""

from __future__ import annotations

import re

SHOWN = 600  # characters of a text shown: a reason the kit writes is a sentence or two
LONGEST_WORD = 120  # characters of a word shown whole: a path of a run, a package's name

_LONG_WORD = re.compile(rf"\S{{{LONGEST_WORD + 1},}}")


def shown_text(text: str, source: str) -> str:
    """`text` as a report shows it; where shortened, with its length and `source` (the file, in
    the run, that holds it whole)."""
    shown = _LONG_WORD.sub(lambda word: f"{word.group()[:60]}…{word.group()[-40:]}", text[:SHOWN])
    if shown == text:
        return text
    return f"{shown}… ({len(text):,} characters in {source})"
