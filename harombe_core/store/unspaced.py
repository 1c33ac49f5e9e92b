"""Text of scripts written without spaces, as the SQLite keyword index is given it.

FTS5's unicode61 tokenizer makes one token of a whole run of Han ideographs, Hiragana or
Katakana (a whole Chinese or Japanese sentence), so no word inside it could be found. Every
writer of the messages' keyword index (the catch-up and rebuild in ``fts``, the relink after a
delete in ``erasure``) passes the text through :func:`spaced`, which sets each such character
apart as a token of its own; a query's run is then looked up as phrases of its characters.
"""

from __future__ import annotations

import re

__all__ = ["UNSPACED", "spaced"]

#: One character of a script written without spaces between words (Han ideographs, Hiragana,
#: Katakana; Korean is written with spaces and is left alone).
UNSPACED = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]")


def spaced(text: str) -> str:
    """``text`` with each character of :data:`UNSPACED` set apart by spaces, so that it is a
    token of its own and any word of such text is found as the phrase of its characters.
    Other text is returned unchanged."""
    return UNSPACED.sub(r" \g<0> ", text) if UNSPACED.search(text) else text
