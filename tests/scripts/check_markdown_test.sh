#!/usr/bin/env bash
# scripts/check-markdown.py: the repository's Markdown renders (every fence
# closed and named, every link to a heading or file resolves), and the check
# catches the faults it exists for: a stray bare fence that swallows the
# sections below it, an unclosed fence, and a Contents link to a heading
# that is gone.
#
#   bash tests/scripts/check_markdown_test.sh SCRIPTS_DIR
set -uo pipefail
scripts="${1:?usage: $0 SCRIPTS_DIR}"
check=("/usr/bin/python3" "$scripts/check-markdown.py")
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The repository itself.
out=$("${check[@]}" 2>&1) || fail "the repository's Markdown: $out"

# expect_problem FILE PATTERN: the check fails and names PATTERN.
expect_problem() {
  local out
  if out=$("${check[@]}" "$1" 2>&1); then
    fail "$1 passed; expected: $2"
  elif ! grep -qE "$2" <<<"$out"; then
    fail "$1: expected a line matching '$2', got: $out"
  fi
}

cat >"$tmp/stray.md" <<'MD'
# Tool

[Usage](#usage) · [API](#api)

## Usage

```sh
tool run
```

```

## API

Calls.
MD
expect_problem "$tmp/stray.md" 'stray.md:11: code fence ``` names no language'
expect_problem "$tmp/stray.md" "stray.md:3: link to #api: no heading"

printf '# T\n\n```sh\necho open\n' >"$tmp/open.md"
expect_problem "$tmp/open.md" 'open.md:3: code fence ```sh is never closed'

printf '# T\n\nSee [x](missing.md) and [y](#t).\n' >"$tmp/file.md"
expect_problem "$tmp/file.md" "file.md:3: link to missing.md: missing.md does not exist"

# A good file passes, with repeated headings and code in a heading.
cat >"$tmp/good.md" <<'MD'
# Good

[a](#notes) · [b](#notes-1) · [c](#the-moe-cli-tool) · [d](good.md#good)

## Notes

## Notes

## The `moe-cli` tool

```text
## not a heading
```
MD
out=$("${check[@]}" "$tmp/good.md" 2>&1) || fail "good.md: $out"

if ((fails)); then
  echo "$fails failed"
  exit 1
fi
echo "check-markdown: all cases pass"
