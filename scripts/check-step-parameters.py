#!/usr/bin/env python3
"""Checks that no function on the step path takes more than 6 parameters.

The step path is the code a step passes through from the batcher to the
experts and back (STEP_PATH below). A function that needs more carries
them in a struct, as StepRequest and EpStepRun do, so that a reader sees
one named bundle and a new field does not ripple through every signature.

  scripts/check-step-parameters.py [REPO_ROOT]    # exit 1 on a violation
  scripts/check-step-parameters.py --self-test    # the check catches one

The ctest check_step_parameters runs it beside check_wing_includes.
"""
import pathlib
import re
import sys
import tempfile

MAX_PARAMETERS = 6
# Folders whose every file is on the step path, and single units (a path
# without its .h/.cc suffix).
STEP_PATH = [
    "server/step/", "server/batching/", "engine/ep_step", "engine/local_moe",
    "engine/expert_runner", "engine/expert_backend", "engine/token_router",
    "engine/caller_overrides", "engine/cpu_backend", "engine/device_backend",
    "worker/step_executor", "proto/step_codec"
]
# Words that precede a parenthesis without naming a function declared there.
NOT_DECLARATIONS = {
    "if", "for", "while", "switch", "return", "co_return", "sizeof", "new",
    "delete", "throw", "case", "else", "do", "catch", "alignof", "decltype",
    "static_assert", "defined"
}
NAME = re.compile(r"([A-Za-z_~][A-Za-z_0-9]*)\s*\(")
# What may stand right before a declared function's name: the end of its
# return type (a word, a template's close, a pointer or reference, a
# qualifier's colons).
TYPE_END = re.compile(r"([A-Za-z_0-9]+|>|\*|&|::)\s*$")
QUALIFIERS = re.compile(r"(?:[A-Za-z_][A-Za-z_0-9]*\s*::\s*)+$")
AFTER_DECLARATION = re.compile(
    r"\s*(const|override|final|noexcept|->|=|\{|;|:|ABSL_[A-Z_]+|MOE_[A-Z_]+"
    r"|&|$)")


def strip(text):
    """`text` without comments, string or character literals, keeping
    newlines so that line numbers still hold."""
    out = re.sub(r"//[^\n]*", "", text)
    out = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), out,
                 flags=re.S)
    out = re.sub(r'"(\\.|[^"\\\n])*"', '""', out)
    out = re.sub(r"'(\\.|[^'\\\n])*'", "''", out)
    return re.sub(r"^\s*#[^\n]*", "", out, flags=re.M)


def parameters(text, open_at):
    """The top-level parameters between the parenthesis at open_at and its
    match, and the index after the match; None if it never closes."""
    depth, start, params = 0, open_at + 1, []
    for i in range(open_at, len(text)):
        c = text[i]
        if c in "([{<":
            # '<' opens only a template argument list here: a comparison
            # cannot stand in a parameter list.
            depth += 1
        elif c in ")]}>":
            if c == ">" and text[i - 1] == "-":
                continue
            depth -= 1
            if depth == 0:
                params.append(text[start:i])
                return [p.strip() for p in params if p.strip()], i + 1
        elif c == "," and depth == 1:
            params.append(text[start:i])
            start = i + 1
    return None


def declarations(text):
    """(line, name, parameter count) of each function declared or defined
    in `text` (comments and literals stripped)."""
    for m in NAME.finditer(text):
        name = m.group(1)
        if name in NOT_DECLARATIONS or name.isupper():
            continue
        # A qualified name (absl::StrCat, EpStep::Run) is judged by what
        # stands before its qualifiers.
        head = QUALIFIERS.sub("", text[:m.start()])
        before = TYPE_END.search(head)
        if before is None or before.group(1) in NOT_DECLARATIONS:
            continue
        found = parameters(text, m.end() - 1)
        if found is None:
            continue
        params, after = found
        if params == ["void"]:
            params = []
        if not AFTER_DECLARATION.match(text, after):
            continue
        # A call written as a variable's initialiser (`Type name(a, b)`)
        # passes values, not declarations: every parameter of a
        # declaration has a type and usually a name, so at least one holds
        # two words or a type's punctuation.
        if params and not any(re.search(r"[\s*&<:]", p) for p in params):
            continue
        yield text.count("\n", 0, m.start()) + 1, name, len(params)


def step_path_files(root):
    root = pathlib.Path(root)
    for entry in STEP_PATH:
        if entry.endswith("/"):
            yield from sorted(p for p in (root / entry).rglob("*")
                              if p.suffix in (".h", ".cc", ".cu"))
        else:
            for suffix in (".h", ".cc"):
                if (root / (entry + suffix)).exists():
                    yield root / (entry + suffix)


def check(root):
    errors = []
    for path in step_path_files(root):
        rel = path.relative_to(root).as_posix()
        for line, name, count in declarations(strip(path.read_text())):
            if count > MAX_PARAMETERS:
                errors.append(f"{rel}:{line}: {name} takes {count} "
                              f"parameters; at most {MAX_PARAMETERS} on the "
                              "step path (carry them in a struct)")
    return errors


def self_test():
    text = ("// A comment (a, b, c, d, e, f, g) is not a function.\n"
            "absl::Status Seven(int a, int b, int c, int d, int e, int f,\n"
            "                   const std::vector<int>& g);\n"
            "void Six(int a, int b, int c, int d, int e, int f) {\n"
            "  Call(a, b, c, d, e, f, a);\n"
            "}\n")
    with tempfile.TemporaryDirectory() as tmp:
        p = pathlib.Path(tmp, "engine/ep_step.h")
        p.parent.mkdir(parents=True)
        p.write_text(text)
        errors = check(pathlib.Path(tmp))
    if len(errors) != 1 or "Seven takes 7" not in errors[0]:
        print("self-test: expected only Seven's 7 parameters, got", errors,
              file=sys.stderr)
        return 1
    print("self-test: the 7-parameter declaration was caught")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(
        argv[1] if len(argv) > 1 else pathlib.Path(__file__).parent.parent)
    errors = check(root)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        return 1
    print(f"check-step-parameters: no function on the step path takes more "
          f"than {MAX_PARAMETERS} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
