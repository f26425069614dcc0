"""The real headless Chromium that `make setup` installs, for the tests that look at the HTML
report in a browser (tests/e2e/test_e2e_html.py, test_e2e_history.py)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium(page: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (make setup installs it: apt-get install chromium)")
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp / 'chromium-profile'}", *args,
                           page.resolve().as_uri()], capture_output=True, text=True, timeout=120,
                          check=False)


def png_facts(path: Path) -> tuple[int, int, int]:
    """(width, height, distinct byte values of the decompressed image data)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    idat, pos = b"", 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        if data[pos + 4:pos + 8] == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    return width, height, len(set(zlib.decompress(idat)))
