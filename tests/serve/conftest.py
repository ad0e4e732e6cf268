"""The serve tests' fixtures live in serve_world.py and browser_support.py (unique module
names to import)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from browser_support import browser
from serve_world import server, world

__all__ = ["browser", "server", "world"]
