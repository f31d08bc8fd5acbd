"""Discovery of listeners through the entry-point group ``radt.listeners``."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points

from radt.errors import UsageError
from radt.listener import Listener

GROUP = "radt.listeners"


@dataclass
class Discovered:
    """A listener found through its entry point, loaded or not."""

    name: str
    target: str
    listener: Listener | None
    reason: str | None
    """None when the listener can run here; else why it cannot."""


def discover(options: dict[str, dict[str, str]] | None = None) -> dict[str, Discovered]:
    """Load every registered listener, give it its ``-o`` options, ask whether it can run here."""
    found: dict[str, Discovered] = {}
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        if ep.name in found:
            continue
        try:
            listener = ep.load()()
            configure = getattr(listener, "configure", None)
            if configure is not None:
                configure(dict((options or {}).get(ep.name, {})))
            reason = listener.available()
        except Exception as exc:  # a broken plugin must not break radT
            found[ep.name] = Discovered(ep.name, ep.value, None, f"failed to load: {exc}")
            continue
        found[ep.name] = Discovered(ep.name, ep.value, listener, reason)
    return found


def parse_names(spec: str) -> list[str]:
    """Split ``top+iostat`` (``,`` works too) into names, keeping their order."""
    names = [part.strip() for part in spec.replace(",", "+").split("+")]
    return list(dict.fromkeys(name for name in names if name))


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
    found = discover(options) if found is None else found
    if spec is None:
        return [
            d.listener
            for d in found.values()
            if d.listener and d.reason is None and d.listener.on_by_default
        ]
    names = parse_names(spec)
    if spec.strip().lower() == "none":
        return []
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
