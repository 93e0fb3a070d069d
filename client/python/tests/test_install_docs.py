"""The install instructions: one, the one that works on Debian 12.

Debian 12's Python refuses a bare `pip install` (externally-managed-
environment), so both READMEs give the same virtual-environment line, and
the environment it makes is git-ignored.
"""

from __future__ import annotations

import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
VENV_LINE = (
    "python3 -m venv --system-site-packages .venv && "
    ".venv/bin/pip install --no-deps client/python"
)


def _read(*parts: str) -> str:
    with open(os.path.join(REPO, *parts), encoding="utf-8") as f:
        return f.read()


def _pip_installs(text: str) -> set[str]:
    """The command lines (not prose) that run pip install."""
    return {
        l.strip()
        for l in text.splitlines()
        if re.match(r"\s*(sudo\s+)?(python3?|pip3?|\S*/pip)\b", l) and "pip install" in l
    }


def test_one_install_line_the_venv_one():
    for readme in (("README.md",), ("client", "python", "README.md")):
        lines = _pip_installs(_read(*readme))
        assert lines == {VENV_LINE}, (readme, lines)


def test_venv_is_ignored():
    ignored = [l.strip() for l in _read(".gitignore").splitlines()]
    assert "/.venv/" in ignored or ".venv/" in ignored
