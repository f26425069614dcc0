"""The README is short, and every command it shows is run by a test.

What counts as a command: the README fences every code block with what it holds (```sh for
commands to type, ```text for what the suite prints, ```python, ```ssh-config ...). Every
non-blank line of a ```sh (or ```bash, ```shell, ```console) block is one command, less a
comment (`#` at the start of a word, outside quotes) and with runs of spaces made one; a line
ending in `\\` goes on with the next; a line that is only a comment is none. Lines of the other
blocks are not commands, and none of them may start like one (`make`, `cluster-tests`,
`pytest`, `.venv/bin/`, `bash`, `srun`, `salloc`, `pip`, `python`), so that no command hides
in a block that is not extracted; `deepspeed ...` lines may appear there (the verdict prints
the launch line). Inline code in the prose (an option, `-k node3`) is not a command.

Each command is listed in tests/readme_commands.py with the tests that run it (what "run"
means is said there), or in its NOT_A_TEST with why no test can; every test named there exists
(found by parsing the test files, nothing imported or run).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from paths import REPO
from readme_commands import COMMANDS, NOT_A_TEST

README = REPO / "README.md"
MAX_LINES = 350
COMMAND_BLOCKS = {"sh", "bash", "shell", "console"}
#: how a command starts; a line of another block must not start so
COMMAND_WORDS = ("make ", "cluster-tests ", "pytest ", ".venv/bin/", "bash ", "srun ", "salloc ",
                 "pip ", "python ", "python3 ")
FENCE = re.compile(r"^```(.*)$")


def blocks(text: str) -> list[tuple[int, str, list[str]]]:
    """(line number of the opening fence, its language, the lines inside) of each fenced block."""
    found: list[tuple[int, str, list[str]]] = []
    current: tuple[int, str, list[str]] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line)
        if current is None and fence:
            current = (number, fence.group(1).strip(), [])
        elif current is not None and line.rstrip() == "```":
            found.append(current)
            current = None
        elif current is not None:
            current[2].append(line)
    assert current is None, f"README line {current[0]}: a code block is never closed"
    return found


def without_comment(line: str) -> str:
    """`line` cut at its first `#` that starts a word outside quotes."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def commands(text: str) -> list[str]:
    """The commands of the ```sh blocks of `text`, in order (the module docstring's rule)."""
    found: list[str] = []
    for _, language, lines in blocks(text):
        if language not in COMMAND_BLOCKS:
            continue
        pending = ""
        for line in lines:
            line = pending + without_comment(line).strip()
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1].rstrip() + " "
                continue
            if line:
                found.append(" ".join(line.split()))
        if pending.strip():
            found.append(" ".join(pending.split()))
    return found


def test_the_rule_reads_commands_comments_continuations_and_quotes() -> None:
    sample = "\n".join([
        "```sh",
        "make demo    # set up and run",
        "# only a comment",
        "",
        'pytest --hostfile h -m "not a # comment"   # but this is',
        "tool --one \\",
        "    --two",
        "```",
        "```text",
        "make this output",
        "```",
    ])
    assert commands(sample) == ["make demo", 'pytest --hostfile h -m "not a # comment"',
                                "tool --one --two"]


def test_readme_is_at_most_350_lines() -> None:
    count = len(README.read_text().splitlines())
    assert count <= MAX_LINES, f"README.md has {count} lines; at most {MAX_LINES}"


def test_every_block_says_what_it_holds_and_no_command_hides_outside_sh() -> None:
    for number, language, lines in blocks(README.read_text()):
        assert language, f"README line {number}: a code block without a language (```sh, ```text)"
        if language in COMMAND_BLOCKS:
            continue
        hidden = [ln for ln in lines if ln.lstrip().startswith(COMMAND_WORDS)]
        assert not hidden, f"README line {number}: commands in a ```{language} block: {hidden}"


def test_every_command_of_the_readme_is_run_by_a_test() -> None:
    shown = commands(README.read_text())
    assert shown, "no command found in README.md"
    unrun = [c for c in shown if c not in COMMANDS and c not in NOT_A_TEST]
    assert not unrun, ("README commands that no test runs (add the test that runs each to "
                       "tests/readme_commands.py, or change the command):\n  "
                       + "\n  ".join(dict.fromkeys(unrun)))


def test_the_registry_names_only_readme_commands() -> None:
    shown = set(commands(README.read_text()))
    stale = sorted((set(COMMANDS) | set(NOT_A_TEST)) - shown)
    assert not stale, f"tests/readme_commands.py lists commands the README no longer shows: {stale}"


def _test_names(path: Path) -> set[str]:
    """`test_x` and `TestY::test_x` for every test function the file defines."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.update(f"{node.name}::{item.name}" for item in node.body
                         if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return {n for n in names if n.rsplit("::", 1)[-1].startswith("test")}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_registered_test_exists(command: str) -> None:
    tests = COMMANDS[command]
    assert tests, f"{command!r}: no test named"
    for test_id in tests:
        path, _, name = test_id.partition("::")
        file = REPO / path
        assert file.is_file() and name, f"{command!r}: {test_id!r} is no file::test"
        assert name.split("[", 1)[0] in _test_names(file), f"{command!r}: no test {test_id!r}"
