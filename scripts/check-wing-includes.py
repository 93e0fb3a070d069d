#!/usr/bin/env python3
"""Checks that server/'s wings include each other only downwards.

Each wing (a folder under server/) may include only the wings its row of
WINGS names; the process's files at the top of server/ may include any
wing, and no wing includes them. Only server/group/ (and its tests) may
include worker_pool.h; everything else, the process's own files included
(they build the group through worker_group_factory.h), reaches the group
through its seams (StepGroup, PlacementTarget, GroupReadiness, WorkerGroup).

  scripts/check-wing-includes.py [REPO_ROOT]    # exit 1 on a violation
  scripts/check-wing-includes.py --self-test    # the check catches both

README.md's layout table states the same rule for people; this is what
enforces it (ctest check_wing_includes).
"""
import pathlib
import re
import sys
import tempfile

# What each wing may include besides itself (and everything outside
# server/).
WINGS = {
    "step": set(),
    "placement": {"step"},
    "group": {"step", "placement"},
    "batching": {"step"},
    "api": {"batching", "step", "placement", "group"},
}
POOL = "server/group/worker_pool.h"
INCLUDE = re.compile(r'^\s*#\s*include\s+"(server/[^"]+)"', re.M)


def wing_of(rel):
    """The wing of a path under server/ or tests/server/; "top" if none."""
    parts = rel.split("/")
    if parts[0] == "tests":
        parts = parts[1:]
    if len(parts) > 2 and parts[1] in WINGS:
        return parts[1]
    return "top"


def check(root):
    root = pathlib.Path(root)
    errors = []
    for folder in ("server", "tests/server"):
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".h", ".cc"):
                continue
            rel = path.relative_to(root).as_posix()
            wing = wing_of(rel)
            is_test = rel.startswith("tests/")
            for inc in INCLUDE.findall(path.read_text()):
                target = wing_of(inc)
                if inc == POOL and wing != "group":
                    errors.append(f"{rel}: includes {inc}; only group/ may "
                                  "(use worker_group_factory.h's seams)")
                if is_test or wing == "top" or target == wing:
                    continue
                if target == "top":
                    errors.append(f"{rel}: includes {inc}, a file of the "
                                  "process above every wing")
                elif target not in WINGS[wing]:
                    errors.append(f"{rel}: includes {inc}: {wing}/ may "
                                  f"include only {sorted(WINGS[wing])}")
    return errors


def self_test():
    cases = {
        "server/step/a.h": '#include "server/batching/b.h"\n',
        "server/api/c.cc": '#include "server/group/worker_pool.h"\n',
        "server/group/d.h": '#include "server/router.h"\n',
        "server/router.cc": '#include "server/group/worker_pool.h"\n',
    }
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in cases.items():
            p = pathlib.Path(tmp, rel)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        pathlib.Path(tmp, "tests/server").mkdir(parents=True)
        errors = check(tmp)
    found = {e.split(":")[0] for e in errors}
    if found != set(cases):
        print("self-test: expected a violation in each of", sorted(cases),
              "got", errors, file=sys.stderr)
        return 1
    print(f"self-test: {len(errors)} violations caught")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else pathlib.Path(__file__).parent.parent
    errors = check(root)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        return 1
    print("check-wing-includes: every include stays within its wing's rule")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
