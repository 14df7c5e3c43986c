#!/usr/bin/env python3
"""The function-length check: no `fn` in the workspace is longer than a
limit (70 lines unless told), counted from the line of its `fn` keyword
through the line of its closing brace.

Every .rs file under the workspace's source folders is read (src, tests,
benches, examples, fuzz, crates; never a `target` directory, nor the fuzz
corpus and artifacts). Comments, string literals (raw, byte and C strings
too) and character literals are blanked first, so that a brace inside one
counts for nothing; a lifetime or a label is not a character literal. A
function's body is the first `{` after its name outside parentheses and
brackets; a `;` there first is a declaration without a body (a trait
method), not measured. A nested function is measured on its own and also
counts in the lines of the one around it; closures are part of their
function.

Prints `path:line name length` for each function over the limit, longest
first, then a summary line; exits 1 when any is over.

Usage: python3 .ci/fnlen.py [--limit N] [PATH...]
       (PATHs: folders or files; the workspace's folders when none)
"""

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FOLDERS = ["src", "tests", "benches", "examples", "fuzz", "crates"]
# Folders that hold no source: build output, and the fuzzers' inputs.
SKIPPED = {"target", "corpus", "artifacts"}
LIMIT = 70

FN = re.compile(r"\bfn\s+(?:r#)?([A-Za-z_][A-Za-z0-9_]*)")
RAW_STRING = re.compile(r'(?:b|c)?r(#*)"')
IDENTIFIER_CHAR = re.compile(r"[A-Za-z0-9_]")


def blank(text):
    """`text` with spaces in place of every character of a comment or a
    literal (newlines kept, so line numbers stay)."""
    out = []
    i, n = 0, len(text)

    def skip_to(j):
        nonlocal i
        out.append("".join("\n" if c == "\n" else " " for c in text[i:j]))
        i = j

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            skip_to(n if end < 0 else end)
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            skip_to(j)
        elif c in "bcr" and (i == 0 or not IDENTIFIER_CHAR.match(text[i - 1])) and RAW_STRING.match(text, i):
            raw = RAW_STRING.match(text, i)
            close = '"' + raw.group(1)
            end = text.find(close, raw.end())
            skip_to(n if end < 0 else end + len(close))
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            skip_to(min(j + 1, n))
        elif c == "'":
            end = char_literal_end(text, i)
            if end is None:
                out.append(c)  # a lifetime or a label
                i += 1
            else:
                skip_to(end)
        else:
            out.append(c)
            i += 1
    return "".join(out)


def char_literal_end(text, i):
    """The end of the character literal opening at `text[i]` (a `'`), or
    None if it opens a lifetime or a label (`'a`, `'static`, `'outer:`)."""
    n = len(text)
    if i + 1 < n and text[i + 1] == "\\":
        # An escape: '\n', '\'', '\\', '\x7f', '\u{1F600}'.
        end = text.find("'", i + 3)
        return None if end < 0 else end + 1
    if i + 2 < n and text[i + 2] == "'" and text[i + 1] != "\n":
        return i + 3
    return None


def functions(text):
    """(line, name, lines) of every function with a body in `text`."""
    code = blank(text)
    for found in FN.finditer(code):
        start = body_start(code, found.end())
        if start is None:
            continue
        end = closing_brace(code, start)
        first = code.count("\n", 0, found.start()) + 1
        last = code.count("\n", 0, end) + 1
        yield first, found.group(1), last - first + 1


def body_start(code, j):
    """Where the body after a signature from `j` opens, or None for a
    declaration (`;` first) or a file that ends first."""
    depth = 0
    for k in range(j, len(code)):
        c = code[k]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth <= 0 and c == "{":
            return k
        elif depth <= 0 and c == ";":
            return None
    return None


def closing_brace(code, start):
    """The `}` that closes the `{` at `start` (the end of `code` if none)."""
    depth = 0
    for k in range(start, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(code) - 1


def sources(paths):
    """Every .rs file under `paths`, in order, outside skipped folders."""
    for path in paths:
        if path.is_file():
            yield path
            continue
        for file in sorted(path.rglob("*.rs")):
            if not SKIPPED.intersection(file.relative_to(path).parts[:-1]):
                yield file


def shown(path):
    try:
        return path.resolve().relative_to(ROOT)
    except ValueError:
        return path


def main():
    parser = argparse.ArgumentParser(description="Rust functions longer than a limit.")
    parser.add_argument("--limit", type=int, default=LIMIT, help=f"lines allowed (default {LIMIT})")
    parser.add_argument("paths", nargs="*", type=pathlib.Path, help="folders or files (default: the workspace's)")
    arguments = parser.parse_args()
    paths = arguments.paths or [ROOT / folder for folder in FOLDERS if (ROOT / folder).is_dir()]
    over, total = [], 0
    for path in sources(paths):
        for line, name, lines in functions(path.read_text(encoding="utf-8", errors="replace")):
            total += 1
            if lines > arguments.limit:
                over.append((lines, f"{shown(path)}:{line} {name} {lines}"))
    for _, row in sorted(over, key=lambda item: (-item[0], item[1])):
        print(row)
    print(f"{len(over)} of {total} functions over {arguments.limit} lines")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
