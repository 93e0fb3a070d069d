#!/usr/bin/python3
"""Checks that Markdown files render as their authors meant.

    scripts/check-markdown.py [FILE.md ...]   (default: every tracked *.md)

A CommonMark parser (Debian's python3-markdown-it) reads each file, so the
checks see the structure a renderer builds, not a guess from lines:

  * every code fence closes before the end of the file, and every opening
    fence names its language (```sh, ```text, ...): a stray bare fence then
    shows up where it opens instead of silently swallowing the sections
    below it;
  * every link to a heading (#anchor, FILE.md#anchor) names a heading that
    exists, with GitHub's anchor rules;
  * every relative link to a file or folder names one that exists.

Prints one line per problem (FILE:LINE: what) and exits 1 when there is
any, 0 otherwise.
"""

import pathlib
import re
import subprocess
import sys

from markdown_it import MarkdownIt

ROOT = pathlib.Path(__file__).resolve().parent.parent


def github_anchor(text, seen):
    """The anchor GitHub gives a heading: lower case, punctuation other than
    '-' and '_' dropped, spaces as '-', a suffix -1, -2, ... on repeats."""
    slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
    count = seen.get(slug, 0)
    seen[slug] = count + 1
    return slug if count == 0 else f"{slug}-{count}"


def heading_text(inline):
    # The anchor comes from the rendered text: code spans keep their content,
    # link and emphasis markers go.
    return "".join(
        child.content
        for child in (inline.children or [])
        if child.type in ("text", "code_inline")
    )


class Document:
    def __init__(self, path):
        self.path = path
        self.text = path.read_text(encoding="utf-8")
        self.tokens = MarkdownIt("commonmark").enable("table").parse(self.text)
        self._anchors = None

    def anchors(self):
        if self._anchors is None:
            seen = {}
            self._anchors = set()
            for i, tok in enumerate(self.tokens):
                if tok.type == "heading_open":
                    text = heading_text(self.tokens[i + 1])
                    self._anchors.add(github_anchor(text, seen))
            # Explicit HTML anchors (<a id="x"> or name="x") count too.
            for m in re.finditer(r'<a\s+(?:id|name)="([^"]+)"', self.text):
                self._anchors.add(m.group(1))
        return self._anchors


def fence_problems(doc):
    lines = doc.text.split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    problems = []
    for tok in doc.tokens:
        if tok.type != "fence":
            continue
        start, end = tok.map
        line = start + 1
        if not tok.info.strip():
            problems.append(
                (line, f"code fence {tok.markup} names no language "
                 "(a stray fence opens a block here)"))
        # An unclosed fence runs to the end of the document: its block ends
        # on the last line and that line is no closing fence.
        last = lines[end - 1].strip() if end - 1 < len(lines) else ""
        closes = (end - start >= 2 and last.startswith(tok.markup)
                  and set(last) == {tok.markup[0]})
        if not closes:
            problems.append(
                (line, f"code fence {tok.markup}{tok.info} is never closed"))
    return problems


def link_targets(doc):
    """(line, href) of every link, found in inline tokens."""
    for tok in doc.tokens:
        if tok.type != "inline" or not tok.children:
            continue
        line = tok.map[0] + 1 if tok.map else 0
        for child in tok.children:
            if child.type == "link_open":
                yield line, child.attrGet("href") or ""


def link_problems(doc, documents):
    problems = []
    for line, href in link_targets(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", href, re.I):
            continue  # http:, https:, mailto: ...
        target, _, anchor = href.partition("#")
        if target:
            path = (doc.path.parent / target).resolve()
            if not path.exists():
                problems.append((line, f"link to {href}: {target} does not exist"))
                continue
        else:
            path = doc.path
        if anchor and path.suffix == ".md":
            other = documents.setdefault(path, Document(path))
            if anchor not in other.anchors():
                problems.append(
                    (line, f"link to {href}: no heading with anchor '{anchor}'"))
    return problems


def tracked_markdown():
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "*.md"],
                         check=True, capture_output=True, text=True).stdout
    # Vendored or generated folders are not ours to fix.
    return [ROOT / p for p in out.split() if "node_modules/" not in p]


def main(argv):
    paths = [pathlib.Path(a).resolve() for a in argv] or tracked_markdown()
    documents = {}
    failures = 0
    for path in paths:
        doc = documents.setdefault(path, Document(path))
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        for line, what in sorted(fence_problems(doc) + link_problems(doc, documents)):
            print(f"{shown}:{line}: {what}")
            failures += 1
    print(f"check-markdown: {len(paths)} files, {failures} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
