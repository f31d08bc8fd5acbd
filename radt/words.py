"""Counting things in messages: ``1 run``, ``2 runs``, ``1,234 samples`` — wherever radT counts."""

from __future__ import annotations


def plural(noun: str) -> str:
    """``run`` → ``runs``, ``summary row`` → ``summary rows``, ``entry`` → ``entries``."""
    if noun.endswith("y") and noun[-2:-1] not in tuple("aeiou"):
        return noun[:-1] + "ies"
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    return noun + "s"


def count(n: int, noun: str, many: str | None = None) -> str:
    """``n`` and the noun in the number it needs: ``1 run``, ``0 runs``, ``1,234 samples``.

    ``many`` is the plural when it is not regular (``count(2, "run in them",
    "runs in them")``).
    """
    word = noun if n == 1 else (many or plural(noun))
    return f"{n:,} {word}"
