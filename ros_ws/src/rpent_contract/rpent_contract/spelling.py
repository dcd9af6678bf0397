"""The name a misspelt one was probably meant to be, for error messages that say what to
type instead (parameters, bring-up arguments, a skills file's fields)."""
from __future__ import annotations

import difflib


def did_you_mean(name: str, known, quote: bool = False) -> str:
    """`` (did you mean X?)`` with the name of ``known`` closest to a misspelt ``name``, or
    nothing when none is close."""
    close = difflib.get_close_matches(name, sorted(known), n=1)
    q = "'" if quote else ""
    return f" (did you mean {q}{close[0]}{q}?)" if close else ""
