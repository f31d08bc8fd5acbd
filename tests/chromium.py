"""Headless Chromium for the browser tests and the UI benchmark: where it is, how it starts.

Debian's ``/usr/bin/chromium`` (``$RADT_CHROMIUM`` names another), driven through
Playwright with the flags below: headless, no sandbox (containers run as root),
no GPU (WebGL falls back to SwiftShader), and none of the background traffic a
first start makes (updates, sync, QUIC), so that a page's load is the page's.
"""

from __future__ import annotations

import os
from pathlib import Path

CHROMIUM = Path(os.environ.get("RADT_CHROMIUM", "/usr/bin/chromium"))
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INSTALL = "`apt-get install chromium` (Debian's package)"


def launch(playwright):
    """Chromium with :data:`FLAGS`, from a started ``sync_playwright()``."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
