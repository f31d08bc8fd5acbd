"""``radt ui``: serve the web UI on loopback (unless told otherwise) and say where."""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import socket
import sys
import threading

from radt.errors import UsageError


def ui_parser() -> argparse.ArgumentParser:
    """Options of ``radt ui``."""
    parser = argparse.ArgumentParser(
        prog="radt ui",
        description="Browse runs, overlay their hardware series and compare naive, MPS and "
        "MIG sharing in a web page. Reads the store that radT writes to.",
    )
    parser.add_argument(
        "--tracking-uri", help="overrides MLFLOW_TRACKING_URI (default ./mlflow.db)"
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 exposes "
        "the runs to the network, without any login)",
    )
    parser.add_argument("--port", type=int, default=8050, help="default 8050")
    return parser


def run_ui(argv: list[str]) -> int:
    """``radt ui [--tracking-uri URI] [--host 127.0.0.1] [--port 8050]``; returns when stopped."""
    import flask.cli

    from radt.tracking import prepare_process_env

    args = ui_parser().parse_args(argv)
    if not 0 < args.port < 65536:
        raise UsageError(f"--port must be between 1 and 65535, got {args.port}")
    _check_port(args.host, args.port)
    prepare_process_env()  # an unreachable server fails a page in seconds, not minutes
    from radt.frontend.app import create_app
    from radt.frontend.data import Store

    store = Store(args.tracking_uri)
    app = create_app(store=store)
    threading.Thread(target=_warm, args=(store,), daemon=True, name="radt-ui-warm").start()
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"radt ui: http://{host}:{args.port}/  (tracking store {store.label}; Ctrl-C stops)")
    sys.stdout.flush()
    # radT's line above is the only one: no "Running on", "Dash is running on",
    # "* Serving Flask app" or "* Debug mode: off" after it
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app.logger.setLevel(logging.WARNING)
    flask.cli.show_server_banner = lambda *args, **kwargs: None
    try:
        app.run(host=args.host, port=args.port, debug=False, dev_tools_ui=False)
    except OSError as exc:
        raise UsageError(
            f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc}); "
            "choose another --port"
        ) from exc
    return 0


def _check_port(host: str, port: int) -> None:
    """Refuse, in one line and before saying any URL, a port the UI could not listen on."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UsageError(
                    f"port {port} on {host} is in use by another program; choose another --port"
                ) from exc
            raise UsageError(
                f"cannot listen on {host}:{port} ({exc.strerror or exc}); "
                "check --host or choose another --port"
            ) from exc


def _warm(store) -> None:
    """Open the store and build a tiny chart once, in the background: the first page
    then does not pay for importing MLflow, radT's analysis API and plotly's figure code."""
    problem = store.check()
    if problem:
        print(f"radt ui: warning: {problem}", file=sys.stderr)
    import pandas as pd
    from radt.frontend.series import RunLabel, timeseries_figure

    import radt.analysis.summary  # noqa: F401  (the Runs page's first call)

    frame = pd.DataFrame(
        {"run_id": ["r"], "key": ["a/b/c_w"], "timestamp": [pd.Timestamp(0, tz="UTC")]}
    ).assign(value=1.0)
    with contextlib.suppress(Exception):  # only a warm-up: the pages report real failures
        timeseries_figure(frame, {"r": RunLabel("r", "r", 0)}, ["a/b/c_w"])
