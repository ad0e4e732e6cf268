"""One headless Chromium for the serve tests that drive the inbox in a real browser.

Debian's own ``chromium`` package, never a browser Playwright downloads: `.ci/run`
installs it. Without it (or without playwright) the fixture skips with the reason,
so a module that only uses the fixture needs no skip logic of its own.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium") or "")
                 if p and os.access(p, os.X_OK)), None)


@pytest.fixture
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("no chromium binary (Debian: apt-get install -y chromium chromium-driver)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()
