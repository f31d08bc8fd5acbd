"""``radt listeners [NAME]``: the listeners radT found, whether each can run here, and one
listener's ``-o`` options."""

from __future__ import annotations

import argparse

from radt.errors import UsageError
from radt.launch.command import add_listener_option, parse_listener_options


def run_listeners(argv: list[str]) -> int:
    """``radt listeners [NAME]``: every discovered listener and whether it can run here, or one
    listener's options."""
    parser = argparse.ArgumentParser(prog="radt listeners", description=run_listeners.__doc__)
    parser.add_argument("name", nargs="?", help="a listener: list its -o options")
    add_listener_option(parser, "rapl.root=PATH")
    args = parser.parse_args(argv)
    from radt.launch.registry import discover

    found = discover(parse_listener_options(args.listener_option))
    if args.name is not None:
        return print_listener_options(args.name, found)
    width = max([len(name) for name in found] + [8])
    print(f"{'listener':<{width}}  {'available':<9}  {'default':<7}  details")
    opt_in = []
    for name, item in found.items():
        status = "yes" if item.reason is None else "no"
        default = "on"
        details = f"records {item.target}"
        if item.listener is not None:
            details = f"records {listener_records(item.listener)}"
            if not item.listener.on_by_default:
                default = "opt-in"
                opt_in.append((item.reason is not None, name))
                if item.listener.cost:
                    details += f"; costs: {item.listener.cost}"
        if item.reason is not None:
            details = f"{item.reason}; it {details}"
        print(f"{name:<{width}}  {status:<9}  {default:<7}  {details}")
    if opt_in:
        example = min(opt_in)[1]  # one that can run here, if any
        print(f"opt-in listeners run only when -l names them, e.g. -l top+{example}")
    return 0


def listener_records(listener) -> str:
    """What a listener records: its ``records``, else its class docstring's first line."""
    if listener.records:
        return listener.records
    doc = (type(listener).__doc__ or "").strip().splitlines()
    return doc[0].rstrip(".") if doc else type(listener).__name__


def print_listener_options(name: str, found: dict) -> int:
    """Print one listener's ``-o`` options: key, kind, default (in the kind's words), meaning."""
    item = found.get(name)
    if item is None:
        raise UsageError(f"unknown listener {name}; known listeners: {', '.join(found)}")
    declared = getattr(item.listener, "declared_options", None)
    status = "available here" if item.reason is None else f"not available here: {item.reason}"
    print(f"{name}: {status}")
    if declared is None:
        print(f"{name} does not declare its options; its documentation lists them")
        return 0
    if not declared:
        print(f"{name} takes no -o options")
        return 0
    rows = [("option", "value", "default", "meaning")] + [
        (f"-o {name}.{o.name}=", o.form, o.shown_default, o.help) for o in declared
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for *cells, meaning in rows:
        padded = [cell.ljust(width) for cell, width in zip(cells, widths, strict=True)]
        print("  ".join([*padded, meaning]))
    return 0
