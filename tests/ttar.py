"""Unpack a ttar archive (the text format prometheus/procfs keeps its sysfs fixtures in):

    Directory: a/b          Path: a/b/file           (a line ending in EOF: no final newline)
    Mode: 755               Lines: N
                            <N lines>
                            Mode: 644
"""

from __future__ import annotations

from pathlib import Path


def unpack(text: str, dest: Path, strip: str = "") -> None:
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("Directory: "):
            path = dest / line[len("Directory: "):].removeprefix(strip)
            path.mkdir(parents=True, exist_ok=True)
        elif line.startswith("Path: "):
            path = dest / line[len("Path: "):].removeprefix(strip)
            count = int(lines[i + 1].split(":", 1)[1])
            body = lines[i + 2:i + 2 + count]
            content = "\n".join(body) + "\n"
            if body and body[-1].endswith("EOF"):
                content = "\n".join(body)[:-3]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            i += 1 + count
        i += 1
