"""Discovery of listeners through the entry-point group ``radt.listeners``, and choosing them.

The original radT's names are accepted for the same listeners (:data:`ALIASES`):
its ``dcgmi`` is ``dcgm``, and its ``ps`` (process tree) and ``free``
(memory) are parts of ``top``; radT says so once per process.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points

from radt.errors import UsageError
from radt.listener import Listener, option_problem
from radt.quantities import GROUP

log = logging.getLogger(__name__)

ALIASES = {"dcgmi": "dcgm", "ps": "top", "free": "top"}
"""The original radT's listener names → the listener that records the same."""
ALIASES_NOTE = "listener names of the original radT: dcgmi is dcgm; ps and free are parts of top"
ALIASES_TOLD: set[str] = set()
"""Non-empty once this process has explained the aliases."""


@dataclass
class Discovered:
    """A listener found through its entry point, loaded or not."""

    name: str
    target: str
    listener: Listener | None
    reason: str | None
    """None when the listener can run here; else why it cannot."""


def discover(options: dict[str, dict[str, str]] | None = None) -> dict[str, Discovered]:
    """Load every registered listener, give it its ``-o`` options, ask whether it can run here.

    Raises UsageError for an option key a listener does not declare, or a value of the wrong
    kind (:attr:`Listener.declared_options`), before that listener is made.
    """
    found: dict[str, Discovered] = {}
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        if ep.name in found:
            continue
        try:
            kind = ep.load()
        except Exception as exc:  # a broken plugin must not break radT
            found[ep.name] = Discovered(ep.name, ep.value, None, f"failed to load: {exc}")
            continue
        check_values(ep.name, kind, (options or {}).get(ep.name, {}))
        try:
            listener = kind()
            configure = getattr(listener, "configure", None)
            if configure is not None:
                configure(dict((options or {}).get(ep.name, {})))
            reason = listener.available()
        except Exception as exc:  # a broken plugin must not break radT
            found[ep.name] = Discovered(ep.name, ep.value, None, f"failed to load: {exc}")
            continue
        found[ep.name] = Discovered(ep.name, ep.value, listener, reason)
    return found


def check_values(name: str, kind: type, values: dict[str, str]) -> None:
    """Refuse ``-o NAME.KEY=VALUE`` that the listener ``kind`` does not take, in one line."""
    declared = getattr(kind, "declared_options", None)
    if declared is None:
        return
    for key, raw in values.items():
        problem = option_problem(name, declared, key, raw)
        if problem:
            raise UsageError(problem)


def parse_names(spec: str) -> list[str]:
    """Split ``top+iostat`` (``,`` works too) into names, keeping their order."""
    names = [part.strip() for part in spec.replace(",", "+").split("+")]
    return list(dict.fromkeys(name for name in names if name))


def resolve_aliases(names: list[str], found: dict[str, Discovered]) -> list[str]:
    """``names`` with the original radT's names replaced (``dcgmi`` → ``dcgm``), no repeats.

    A name that a plugin registers itself is kept as it is. The first time this
    process meets an alias, one line on stderr says what the aliases stand for.
    """
    used = {n for n in names if n in ALIASES and n not in found}
    if used and not ALIASES_TOLD:
        ALIASES_TOLD.update(ALIASES)
        log.info(ALIASES_NOTE)
    return list(dict.fromkeys(ALIASES[n] if n in used else n for n in names))


def select(
    spec: str | None,
    found: dict[str, Discovered] | None = None,
    options: dict[str, dict[str, str]] | None = None,
) -> list[Listener]:
    """Return the listeners named in ``spec``, or every available default one when None.

    ``options`` (``-o``) reach each listener before it is asked whether it can run,
    when ``found`` is not given. Raises UsageError, before anything starts, for an
    unknown name or a named listener that cannot run here.
    """
    if found is None and not options and spec is not None and spec.strip().lower() == "none":
        return []  # nothing to ask: loading every listener and its available() is ~0.4 s
    found = discover(options) if found is None else found
    if spec is None:
        return [
            d.listener
            for d in found.values()
            if d.listener and d.reason is None and d.listener.on_by_default
        ]
    if spec.strip().lower() == "none":
        return []
    names = resolve_aliases(parse_names(spec), found)
    unknown = [n for n in names if n not in found]
    if unknown:
        known = ", ".join(found) or "none installed"
        raise UsageError(f"unknown listener {', '.join(unknown)!s}; known listeners: {known}")
    unavailable = [f"{n} ({found[n].reason})" for n in names if found[n].reason]
    if unavailable:
        raise UsageError(
            f"listener not available here: {'; '.join(unavailable)}; "
            "run `radt listeners` to see why, or leave it out of -l"
        )
    return [found[n].listener for n in names]  # type: ignore[misc]


def check_options(options: dict[str, dict[str, str]], running: Iterable[str]) -> None:
    """Refuse ``-o LISTENER.KEY=VALUE`` for a listener that will not run.

    Raises UsageError naming the option and the listeners that do run.
    """
    names = list(dict.fromkeys(running))
    for listener, values in options.items():
        if listener not in names:
            key, value = next(iter(values.items()))
            raise UsageError(
                f"-o {listener}.{key}={value}: listener {listener} is not running "
                f"(running: {', '.join(names) or 'none'}); add it to -l or drop the option"
            )
