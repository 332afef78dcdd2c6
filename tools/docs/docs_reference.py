#!/usr/bin/python3
"""Writes and checks the generated parts of the documentation.

  docs_reference.py write --shardd BIN --coordinator BIN [--root DIR]
  docs_reference.py check --shardd BIN --coordinator BIN [--root DIR]
                          [--only flags,fresh,metrics,links]

Generated (between BEGIN/END GENERATED markers, never edited by hand):
  docs/operations.md  "flags": every flag of both binaries, from --helpfull
  docs/api.md         "api": the services, messages and enums of
                      proto/shardd/v1, from the .proto files and comments

Checks (each prints one line per problem and fails when there is one):
  flags    every flag of both binaries is named (`--flag`) in operations.md
  fresh    the generated parts equal what `write` would produce now
  metrics  docs/metrics.md's tables name exactly the metrics of
           deploy/exported_metrics.txt (besides prometheus-cpp's exposer_*)
  alerts   every alert of deploy/prometheus/alerts.yml has a row in
           operations.md that links its runbook (deploy/README.md#alert)
  links    every relative link of README.md, docs/*.md and deploy/README.md
           points to a file that exists and, with #anchor, to a heading (or
           an explicit anchor) of that Markdown file

scripts/docs-reference builds the binaries and runs `write`;
//tests/docs:docs_test runs the checks. Standard library only.
"""

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proto_doc  # noqa: E402  (beside this file)

PROTO_FILES = [  # Services in this order, then the shared types.
    "proto/shardd/v1/trainer.proto",
    "proto/shardd/v1/peer.proto",
    "proto/shardd/v1/coordinator.proto",
    "proto/shardd/v1/common.proto",
]
OPERATIONS = "docs/operations.md"
API = "docs/api.md"
METRICS = "docs/metrics.md"
EXPORTED = "deploy/exported_metrics.txt"
ALERTS = "deploy/prometheus/alerts.yml"
LINKED_PAGES = ["README.md", "deploy/README.md"]  # and docs/*.md

# ---------------------------------------------------------------------------
# Flags


@dataclasses.dataclass
class Flag:
    name: str
    meaning: str
    default: str
    source: str  # the file that defines it, as absl prints it


_FLAG_HEAD = re.compile(r"^    --([A-Za-z0-9_]+) \(")
_GROUP = re.compile(r"^  Flags from (.+):$")


def parse_helpfull(text):
    """The flags of absl's --helpfull output, less absl's own.

    Each flag is "    --name (meaning); default: value;" wrapped over
    lines indented by six spaces, under "  Flags from FILE:".
    """
    flags = []
    source = None
    entry = None

    def finish():
        if entry is None:
            return
        body = " ".join(entry[1])
        m = re.match(r"^--([A-Za-z0-9_]+) \((.*)\); default: (.*);$", body,
                     re.S)
        if not m:
            raise ValueError(f"cannot parse the help of a flag: {body!r}")
        flags.append(Flag(m.group(1), m.group(2), m.group(3), entry[0]))

    for line in text.split("\n"):
        g = _GROUP.match(line)
        if g:
            finish()
            entry = None
            source = g.group(1)
            continue
        if _FLAG_HEAD.match(line):
            finish()
            entry = (source, [line.strip()])
        elif line.startswith("      ") and entry is not None:
            entry[1].append(line.strip())
        else:
            finish()
            entry = None
    finish()
    return [f for f in flags if not _is_absl(f.source)]


def _is_absl(source):
    return re.match(r"^(\./)?(.*/)?absl/", source) is not None


def helpfull(binary):
    """The --helpfull text of `binary` (absl exits 1 after printing it)."""
    out = subprocess.run([binary, "--helpfull"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=60,
                         check=False)
    if "Flags from" not in out.stdout:
        raise RuntimeError(f"{binary} --helpfull printed no flags:\n"
                           f"{out.stdout[-2000:]}")
    return out.stdout


def _cell(text):
    return proto_doc._escape(text).replace("\n", " ")


def render_flags(binaries):
    """The generated flag reference: `binaries` is [(name, target, text)]."""
    out = []
    for name, target, text in binaries:
        usage = text.split("\n", 1)[0]
        if usage.startswith(name + ": "):
            usage = usage[len(name) + 2:]
        flags = parse_helpfull(text)
        out.append(f"### {name} flags")
        out.append("")
        out.append(f"`{target}` ({_cell(usage)}); {len(flags)} flags, "
                   f"from `{name} --helpfull`.")
        out.append("")
        sources = []
        for f in flags:
            if f.source not in sources:
                sources.append(f.source)
        for source in sources:
            out.append(f"Defined in `{source}`:")
            out.append("")
            out.append("| flag | default | meaning |")
            out.append("| --- | --- | --- |")
            for f in flags:
                if f.source == source:
                    default = f.default if f.default else '""'
                    out.append(f"| `--{f.name}` | `{default}` | "
                               f"{_cell(f.meaning)} |")
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# ---------------------------------------------------------------------------
# Generated sections


def _markers(name):
    begin = (f"<!-- BEGIN GENERATED: {name} (scripts/docs-reference writes "
             f"this part; do not edit it by hand) -->")
    end = f"<!-- END GENERATED: {name} -->"
    return begin, end


def replace_section(text, name, body, path):
    begin, end = _markers(name)
    b = text.find(begin)
    e = text.find(end)
    if b < 0 or e < b:
        raise ValueError(f"{path}: no '{begin}' ... '{end}' section")
    return text[:b] + begin + "\n\n" + body + "\n" + text[e:]


def generated(root, shardd, coordinator):
    """{path: new text} of the pages with generated sections."""
    flags = render_flags([
        ("shardd", "//daemon/node:shardd", helpfull(shardd)),
        ("coordinator", "//daemon/coordinator:coordinator",
         helpfull(coordinator)),
    ])
    files = [proto_doc.parse_file(os.path.join(root, p), None) for p in
             PROTO_FILES]
    for f, p in zip(files, PROTO_FILES):
        f.path = p  # Named relative to the repository in the page.
    api = proto_doc.render_api(files)
    pages = {}
    for path, name, body in ((OPERATIONS, "flags", flags),
                             (API, "api", api)):
        with open(os.path.join(root, path), encoding="utf-8") as fh:
            text = fh.read()
        pages[path] = replace_section(text, name, body, path)
    return pages


# ---------------------------------------------------------------------------
# Checks


def check_flags(root, shardd, coordinator):
    with open(os.path.join(root, OPERATIONS), encoding="utf-8") as fh:
        page = fh.read()
    problems = []
    for name, binary in (("shardd", shardd), ("coordinator", coordinator)):
        for f in parse_helpfull(helpfull(binary)):
            if not re.search(rf"--{re.escape(f.name)}\b", page):
                problems.append(f"{OPERATIONS}: the {name} flag --{f.name} "
                                f"({f.source}) is not documented")
    return problems


def check_fresh(root, shardd, coordinator):
    problems = []
    for path, text in generated(root, shardd, coordinator).items():
        with open(os.path.join(root, path), encoding="utf-8") as fh:
            old = fh.read()
        if old != text:
            import difflib
            diff = "".join(list(difflib.unified_diff(
                old.splitlines(True), text.splitlines(True), path,
                path + " (regenerated)", n=1))[:40])
            problems.append(f"{path}: a generated section is stale; run "
                            f"scripts/docs-reference\n{diff}")
    return problems


_METRIC_ROW = re.compile(r"^\|\s*([a-z_:][a-z0-9_:]*)\s*\|\s*([a-z]+)")


def documented_metrics(text):
    """Metric names of the tables of docs/metrics.md (as the validator of
    deploy/validate reads them: lower-case names, a type column) and of its
    "both" section's prose (process_*)."""
    names = set()
    for line in text.split("\n"):
        m = _METRIC_ROW.match(line)
        if m and m.group(1) != "name":
            names.add(m.group(1))
    both = text.find("\n## both")
    if both >= 0:
        end = text.find("\n## ", both + 1)
        section = text[both:end if end >= 0 else None]
        names.update(re.findall(r"\b(process_[a-z_]+)\b", section))
    return names


def check_metrics(root):
    with open(os.path.join(root, METRICS), encoding="utf-8") as fh:
        documented = documented_metrics(fh.read())
    with open(os.path.join(root, EXPORTED), encoding="utf-8") as fh:
        exported = {l.strip() for l in fh if l.strip() and
                    not l.lstrip().startswith("#")}
    exported = {n for n in exported if not n.startswith("exposer_")}
    problems = [f"{METRICS}: the exported metric {n} ({EXPORTED}) is not "
                f"documented" for n in sorted(exported - documented)]
    problems += [f"{METRICS}: {n} is documented but not exported "
                 f"({EXPORTED})" for n in sorted(documented - exported)]
    return problems


def check_alerts(root):
    with open(os.path.join(root, ALERTS), encoding="utf-8") as fh:
        alerts = re.findall(r"^\s*-\s*alert:\s*(\S+)", fh.read(), re.M)
    with open(os.path.join(root, OPERATIONS), encoding="utf-8") as fh:
        page = fh.read()
    problems = []
    if not alerts:
        problems.append(f"{ALERTS}: no alert found")
    for name in alerts:
        runbook = f"(../deploy/README.md#{name.lower()})"
        if not re.search(rf"^\| {re.escape(name)} \|.*{re.escape(runbook)}",
                         page, re.M):
            problems.append(f"{OPERATIONS}: the alert {name} ({ALERTS}) has "
                            f"no row linking its runbook {runbook[1:-1]}")
    return problems


_LINK = re.compile(r"(?<!\\)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]+)>?"
                   r"(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s|$)", re.M)
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)


def _strip_code(text):
    """The text without fenced code blocks and inline code spans (links
    inside them are not links)."""
    out = []
    fence = None
    indented = False  # inside an indented code block
    previous_blank = True
    for line in text.split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        blank = not line.strip()
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(
                    fence):
                fence = None
            out.append("")
        elif m:
            fence = m.group(1)
            out.append("")
        elif line.startswith("    ") and (indented or previous_blank):
            indented = True
            out.append("")
        else:
            if not blank:
                indented = False
            out.append(re.sub(r"(`+)(?:(?!\1).)+?\1", "", line))
        previous_blank = blank
    return "\n".join(out)


def _heading_text(raw):
    """A heading's text as GitHub renders it before making the anchor."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)  # links
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    return text.replace("\\", "")


def anchors(text):
    """The anchors GitHub gives a Markdown page: a slug per heading (with
    -1, -2 for repeats) and explicit <a name/id>."""
    seen = {}
    result = set(_ANCHOR.findall(text))
    fence = None
    for line in text.split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if fence:
            if m and m.group(1)[0] == fence[0]:
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        h = _HEADING.match(line)
        if not h:
            continue
        base = proto_doc.slug(_heading_text(h.group(2)))
        n = seen.get(base, 0)
        seen[base] = n + 1
        result.add(base if n == 0 else f"{base}-{n}")
    return result


def links(text):
    """The link targets of a Markdown text (inline and reference style)."""
    body = _strip_code(text)
    return [m.group(2) for m in _LINK.finditer(body)] + \
        _REF_DEF.findall(body)


def check_links(root, pages=None):
    """Relative links of `pages` (paths under root) that point nowhere."""
    if pages is None:
        pages = list(LINKED_PAGES)
        docs = os.path.join(root, "docs")
        if os.path.isdir(docs):
            pages += sorted(os.path.join("docs", p) for p in os.listdir(docs)
                            if p.endswith(".md"))
    cache = {}

    def page_anchors(path):
        if path not in cache:
            with open(path, encoding="utf-8") as fh:
                cache[path] = anchors(fh.read())
        return cache[path]

    problems = []
    for page in pages:
        path = os.path.join(root, page)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        for target in links(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # http:, https:, mailto: ...: not relative.
            file_part, _, fragment = target.partition("#")
            file_part = urllib.parse.unquote(file_part)
            fragment = urllib.parse.unquote(fragment)
            if file_part.startswith("/"):
                dest = os.path.join(root, file_part.lstrip("/"))
            elif file_part:
                dest = os.path.normpath(
                    os.path.join(os.path.dirname(path), file_part))
            else:
                dest = path
            if os.path.relpath(dest, root).startswith(".." + os.sep):
                problems.append(f"{page}: link '{target}' leaves the "
                                f"repository (a fresh clone has nothing "
                                f"there)")
                continue
            if not os.path.exists(dest):
                problems.append(f"{page}: link '{target}': "
                                f"{os.path.relpath(dest, root)} does not "
                                f"exist")
                continue
            if fragment and dest.endswith(".md"):
                if fragment not in page_anchors(dest):
                    problems.append(
                        f"{page}: link '{target}': "
                        f"{os.path.relpath(dest, root)} has no heading or "
                        f"anchor '#{fragment}'")
    return problems


# ---------------------------------------------------------------------------


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["write", "check"])
    parser.add_argument("--root", default=os.getcwd(),
                        help="the repository (default: the current folder)")
    parser.add_argument("--shardd", help="the shardd binary")
    parser.add_argument("--coordinator", help="the coordinator binary")
    parser.add_argument("--only", default="flags,fresh,metrics,alerts,links",
                        help="checks to run (comma-separated)")
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    if args.mode == "write":
        if not (args.shardd and args.coordinator):
            parser.error("write needs --shardd and --coordinator")
        for path, text in generated(root, args.shardd,
                                    args.coordinator).items():
            with open(os.path.join(root, path), "w", encoding="utf-8") as fh:
                fh.write(text)
            print(f"wrote {path}")
        return 0
    problems = []
    for check in args.only.split(","):
        if check in ("flags", "fresh") and not (args.shardd and
                                                args.coordinator):
            parser.error(f"the check '{check}' needs --shardd and "
                         f"--coordinator")
        if check == "flags":
            problems += check_flags(root, args.shardd, args.coordinator)
        elif check == "fresh":
            problems += check_fresh(root, args.shardd, args.coordinator)
        elif check == "metrics":
            problems += check_metrics(root)
        elif check == "alerts":
            problems += check_alerts(root)
        elif check == "links":
            problems += check_links(root)
        else:
            parser.error(f"unknown check '{check}'")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
