#!/usr/bin/env python3
"""Lists the length in lines of every function defined in C++ files.

Usage: func_lengths.py [--min N] FILE...

A heuristic, not a parser: it strips comments, strings and character
literals, tracks braces, and calls a brace block a function body when the
text before it (back to the previous ';', '{' or '}') has a parameter list
and is not a namespace, class, struct, enum, union or control statement.
Lambdas and local classes count toward the function they are in. The length
runs from the signature's first line to the closing brace, inclusive.
"""

import argparse
import re
import sys

_CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else|return)\b")
_TYPE = re.compile(r"\b(namespace|class|struct|enum|union)\b")
_NAME = re.compile(r"([A-Za-z_~][\w:<>~]*(?:operator\s*\S+)?)\s*\(")


def strip(src):
    """Blanks comments and literals, keeping newlines so line numbers hold."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif src.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', src[i:])
            end = ")" + m.group(1) + '"'
            j = src.find(end, i)
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and src[i - 1].isalnum():  # 1'000'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(src):
    """Yields (name, first_line, last_line) for each function body."""
    text = strip(src)
    text = re.sub(r"^\s*#.*$", lambda m: " " * len(m.group(0)), text,
                  flags=re.M)
    stack = []  # (kind, name, first_line)
    head_start = 0
    for i, c in enumerate(text):
        if c == "{":
            head = text[head_start:i]
            kind, name = "block", None
            inside = any(k == "function" for k, _, _ in stack)
            if not inside and not _TYPE.search(head) and not _CONTROL.match(
                    head) and "(" in head:
                m = _NAME.search(head)
                if m and "=" not in head[:m.start()]:
                    kind, name = "function", m.group(1)
            offset = len(head) - len(head.lstrip())
            first = text.count("\n", 0, head_start + offset) + 1
            stack.append((kind, name, first))
            head_start = i + 1
        elif c == "}":
            if stack:
                kind, name, first = stack.pop()
                if kind == "function":
                    yield name, first, text.count("\n", 0, i) + 1
            head_start = i + 1
        elif c == ";":
            head_start = i + 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min", type=int, default=0,
                        help="list only functions of at least this many lines")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    rows = []
    for path in args.files:
        with open(path, encoding="utf-8") as f:
            for name, first, last in functions(f.read()):
                rows.append((last - first + 1, path, first, name))
    for length, path, first, name in sorted(rows, reverse=True):
        if length >= args.min:
            print(f"{length:5d}  {path}:{first}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
