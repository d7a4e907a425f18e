#!/usr/bin/env python3
"""Size limits for the library's source: no file in src/ over MAX_FILE lines and no
function over MAX_FN lines (from the line of its `fn` to the line of its closing brace,
blank lines and comments included, nested functions and closures counted in their
parent).

Why a script and not clippy's `too_many_lines`: that lint counts only code lines, so a
function padded with comments passes it; a reader scrolls through every line.

The scanner understands just enough Rust to find bodies: line and nested block
comments, string, byte-string and raw-string literals, char literals (told apart from
lifetimes), and braces. Exit status 1 lists every offender with FILE:LINE.

Usage: scripts/check-size.py [ROOT]   (ROOT defaults to the repository's src/)
"""

import os
import sys

MAX_FILE = 1000
MAX_FN = 100


def strip(text):
    """The text with comments and literals blanked (newlines kept), so braces and the
    `fn` keyword can be found by plain scanning."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if c == "/" and nxt == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
            continue
        # Raw strings: r"..", r#".."#, br#".."#.
        if c in "rb" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            j = i + 1 if c == "r" else (i + 2 if nxt == "r" else -1)
            if j > 0:
                hashes = 0
                while j < n and text[j] == "#":
                    hashes, j = hashes + 1, j + 1
                if j < n and text[j] == '"':
                    end = text.find('"' + "#" * hashes, j + 1)
                    end = n if end < 0 else end + 1 + hashes
                    out.append("".join(ch if ch == "\n" else " " for ch in text[i:end]))
                    i = end
                    continue
        if c == '"' or (c == "b" and nxt == '"'):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
            continue
        if c == "'":
            # A char literal is 'x' or an escape; anything else is a lifetime or label.
            if nxt == "\\":
                j = text.find("'", i + 2)
                if j > 0:
                    out.append(" " * (j + 1 - i))
                    i = j + 1
                    continue
            elif i + 2 < n and text[i + 2] == "'":
                out.append("   ")
                i += 3
                continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(code):
    """(first line, last line) of every function body in blanked code."""
    found = []
    i, n = 0, len(code)
    while True:
        i = code.find("fn", i)
        if i < 0:
            return found
        before = code[i - 1] if i > 0 else " "
        after = code[i + 2] if i + 2 < n else " "
        if before.isalnum() or before == "_" or not (after.isspace()):
            i += 2
            continue
        # The body is the first `{` outside parentheses and brackets, unless a `;` ends
        # the declaration first (a trait method without a default body).
        j, depth = i + 2, 0
        while j < n:
            ch = code[j]
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif depth == 0 and ch in "{;":
                break
            j += 1
        if j >= n or code[j] == ";":
            i = j
            continue
        k, braces = j, 0
        while k < n:
            if code[k] == "{":
                braces += 1
            elif code[k] == "}":
                braces -= 1
                if braces == 0:
                    break
            k += 1
        first = code.count("\n", 0, i) + 1
        last = code.count("\n", 0, k) + 1
        found.append((first, last))
        i += 2


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "src")
    problems = []
    for d, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.relpath(os.path.join(d, f))
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            lines = text.count("\n") + (0 if text.endswith("\n") else 1)
            if lines > MAX_FILE:
                problems.append(f"{path}: {lines} lines (limit {MAX_FILE}): split it by concept")
            for first, last in functions(strip(text)):
                length = last - first + 1
                if length > MAX_FN:
                    problems.append(
                        f"{path}:{first}: function of {length} lines (limit {MAX_FN})")
    for p in sorted(problems):
        print(p)
    if problems:
        print(f"check-size: {len(problems)} over the limits", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
