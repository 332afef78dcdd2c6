"""The API reference (docs/api.md's generated part) from the .proto files.

Parses what proto/shardd/v1 uses of proto3 (services, rpcs with streams,
messages with nested messages and enums, oneofs, maps, field options) and
the comments: a declaration's comment is the block of `//` lines right
above it (no blank line between) or the `//` comment after it on its line.
A detached block of the form `// ---` / `// Title` / `// ---` starts a
section of the file. Standard library only (/usr/bin/python3).
"""

import dataclasses
import os
import re

_TOKEN = re.compile(
    r"(?P<comment>//[^\n]*)|(?P<space>[ \t\r]+)|(?P<newline>\n)|"
    r"(?P<string>\"[^\"\n]*\")|(?P<word>[A-Za-z0-9_.]+)|(?P<sym>.)")


@dataclasses.dataclass
class Token:
    kind: str  # "word", "string", "sym"
    text: str
    line: int


@dataclasses.dataclass
class Comment:
    text: str
    line: int
    alone: bool  # nothing but the comment on its line


@dataclasses.dataclass
class Field:
    name: str
    type: str
    number: str
    label: str = ""  # "repeated", "optional" or ""
    oneof: str = ""
    doc: str = ""


@dataclasses.dataclass
class EnumValue:
    name: str
    number: str
    doc: str = ""


@dataclasses.dataclass
class Enum:
    name: str  # qualified inside the file: Outer.Inner
    doc: str = ""
    values: list = dataclasses.field(default_factory=list)
    section: str = ""


@dataclasses.dataclass
class Message:
    name: str  # qualified inside the file: Outer.Inner
    doc: str = ""
    fields: list = dataclasses.field(default_factory=list)
    section: str = ""


@dataclasses.dataclass
class Rpc:
    name: str
    request: str
    response: str
    request_stream: bool = False
    response_stream: bool = False
    doc: str = ""


@dataclasses.dataclass
class Service:
    name: str
    doc: str = ""
    rpcs: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ProtoFile:
    path: str
    header: str = ""  # the comment block at the top of the file
    services: list = dataclasses.field(default_factory=list)
    messages: list = dataclasses.field(default_factory=list)  # in file order
    enums: list = dataclasses.field(default_factory=list)
    order: list = dataclasses.field(default_factory=list)  # messages + enums


class ParseError(Exception):
    pass


def _tokenize(text):
    tokens, comments = [], []
    line = 1
    line_has_code = False
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "newline":
            line += 1
            line_has_code = False
        elif kind == "space":
            continue
        elif kind == "comment":
            body = m.group()[2:]
            if body.startswith(" "):
                body = body[1:]
            comments.append(Comment(body.rstrip(), line, not line_has_code))
        else:
            tokens.append(Token(kind, m.group(), line))
            line_has_code = True
    return tokens, comments


_BANNER = re.compile(r"^-{10,}$")


class _Parser:

    def __init__(self, path, text):
        self.path = path
        self.tokens, comments = _tokenize(text)
        self.pos = 0
        self.alone = {c.line: c for c in comments if c.alone}
        self.trailing = {c.line: c for c in comments if not c.alone}
        self.used = set()
        # Section banners: --- / title / --- as three comment lines alone.
        self.sections = []  # (line, title)
        lines = sorted(self.alone)
        for i in range(len(lines) - 2):
            a, b, c = (self.alone[lines[i + k]] for k in range(3))
            if (b.line == a.line + 1 and c.line == b.line + 1 and
                    _BANNER.match(a.text) and _BANNER.match(c.text) and
                    b.text):
                self.sections.append((a.line, b.text))
                self.used.update({a.line, b.line, c.line})

    # -- tokens ----------------------------------------------------------
    def peek(self, offset=0):
        i = self.pos + offset
        return self.tokens[i] if i < len(self.tokens) else None

    def next(self):
        tok = self.peek()
        if tok is None:
            raise ParseError(f"{self.path}: unexpected end of file")
        self.pos += 1
        return tok

    def expect(self, text):
        tok = self.next()
        if tok.text != text:
            raise ParseError(
                f"{self.path}:{tok.line}: expected '{text}', got '{tok.text}'")
        return tok

    # -- comments --------------------------------------------------------
    def leading(self, line):
        """The block of comment lines right above `line`."""
        block = []
        l = line - 1
        while l in self.alone and l not in self.used:
            block.append(self.alone[l].text)
            self.used.add(l)
            l -= 1
        return "\n".join(reversed(block)).strip("\n")

    def trailing_at(self, line):
        c = self.trailing.get(line)
        return c.text if c else ""

    def section_at(self, line):
        title = ""
        for start, t in self.sections:
            if start < line:
                title = t
        return title

    # -- grammar ---------------------------------------------------------
    def parse(self):
        f = ProtoFile(self.path)
        # The file's header: the comment block at its top.
        first = min(self.alone) if self.alone else None
        if first is not None and first == 1:
            block, l = [], 1
            while l in self.alone:
                block.append(self.alone[l].text)
                self.used.add(l)
                l += 1
            f.header = "\n".join(block).strip("\n")
        while self.peek() is not None:
            tok = self.peek()
            if tok.text in ("syntax", "package", "import", "option"):
                while self.next().text != ";":
                    pass
            elif tok.text == "service":
                f.services.append(self.service())
            elif tok.text == "message":
                self.message("", f)
            elif tok.text == "enum":
                self.enum("", f)
            elif tok.text == ";":
                self.next()
            else:
                raise ParseError(
                    f"{self.path}:{tok.line}: unexpected '{tok.text}'")
        return f

    def service(self):
        start = self.expect("service")
        s = Service(self.next().text, self.leading(start.line))
        self.expect("{")
        while self.peek().text != "}":
            tok = self.peek()
            if tok.text == "rpc":
                s.rpcs.append(self.rpc())
            elif tok.text == "option":
                while self.next().text != ";":
                    pass
            else:
                raise ParseError(
                    f"{self.path}:{tok.line}: unexpected '{tok.text}' in "
                    f"service {s.name}")
        self.expect("}")
        return s

    def rpc(self):
        start = self.expect("rpc")
        name = self.next().text
        self.expect("(")
        req_stream = self.peek().text == "stream"
        if req_stream:
            self.next()
        request = self.next().text
        self.expect(")")
        self.expect("returns")
        self.expect("(")
        resp_stream = self.peek().text == "stream"
        if resp_stream:
            self.next()
        response = self.next().text
        self.expect(")")
        end = self.next()
        if end.text == "{":  # rpc options
            depth = 1
            while depth:
                t = self.next().text
                depth += {"{": 1, "}": -1}.get(t, 0)
            end = self.peek(-1)
        doc = self.leading(start.line) or self.trailing_at(end.line)
        return Rpc(name, request, response, req_stream, resp_stream, doc)

    def enum(self, prefix, f):
        start = self.expect("enum")
        e = Enum(prefix + self.next().text, self.leading(start.line),
                 section=self.section_at(start.line))
        f.enums.append(e)
        f.order.append(e)
        self.expect("{")
        while self.peek().text != "}":
            tok = self.next()
            if tok.text in ("option", "reserved"):
                while self.next().text != ";":
                    pass
                continue
            self.expect("=")
            number = self.next().text
            if number == "-":
                number += self.next().text
            end = self.skip_options_to_semicolon()
            doc = self.leading(tok.line) or self.trailing_at(end.line)
            e.values.append(EnumValue(tok.text, number, doc))
        self.expect("}")
        return e

    def skip_options_to_semicolon(self):
        tok = self.next()
        if tok.text == "[":
            while self.next().text != "]":
                pass
            tok = self.next()
        if tok.text != ";":
            raise ParseError(
                f"{self.path}:{tok.line}: expected ';', got '{tok.text}'")
        return tok

    def message(self, prefix, f):
        start = self.expect("message")
        m = Message(prefix + self.next().text, self.leading(start.line),
                    section=self.section_at(start.line))
        f.messages.append(m)
        f.order.append(m)
        self.expect("{")
        self.message_body(m, f, oneof="")
        self.expect("}")
        return m

    def message_body(self, m, f, oneof):
        while self.peek().text != "}":
            tok = self.peek()
            if tok.text == "message":
                self.message(m.name + ".", f)
            elif tok.text == "enum":
                self.enum(m.name + ".", f)
            elif tok.text in ("option", "reserved", "extensions"):
                while self.next().text != ";":
                    pass
            elif tok.text == "oneof":
                self.next()
                name = self.next().text
                self.leading(tok.line)  # The oneof's own comment: dropped.
                self.expect("{")
                self.message_body(m, f, oneof=name)
                self.expect("}")
            elif tok.text == ";":
                self.next()
            else:
                m.fields.append(self.field(oneof))

    def field(self, oneof):
        first = self.next()
        label = ""
        if first.text in ("repeated", "optional"):
            label = first.text
            type_tok = self.next()
        else:
            type_tok = first
        type_ = type_tok.text
        if type_ == "map":
            self.expect("<")
            key = self.next().text
            self.expect(",")
            value = self.next().text
            self.expect(">")
            type_ = f"map<{key}, {value}>"
        name = self.next().text
        self.expect("=")
        number = self.next().text
        end = self.skip_options_to_semicolon()
        doc = self.leading(first.line) or self.trailing_at(end.line)
        return Field(name, type_, number, label, oneof, doc)


def parse_file(path, text=None):
    if text is None:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    return _Parser(path, text).parse()


# ---------------------------------------------------------------------------
# Markdown rendering

_ESCAPE = re.compile(r"([\\*<>\[\]|])")


def _escape(text):
    """Markdown-safe prose: no emphasis, HTML or link syntax by accident.

    Code spans (between backticks) are left as they are.
    """
    parts = text.split("`")
    if len(parts) % 2 == 0:  # An unmatched backtick: escape everything.
        parts = [text.replace("`", "\\`")]
    for i in range(0, len(parts), 2):
        parts[i] = _ESCAPE.sub(r"\\\1", parts[i])
    out = "`".join(parts)
    return re.sub(r"^(\s*)([#+])", r"\1\\\2", out)


def render_comment(text):
    """A proto comment as Markdown.

    Lines starting with "- " are list items (with indented continuation
    lines); other indented lines are preformatted (status code tables,
    pseudo-code) and become fenced blocks; the rest is prose.
    """
    out = []
    state = "para"
    for line in text.split("\n"):
        if not line.strip():
            if state == "code":
                out.append("```")
            out.append("")
            state = "para"
            continue
        indented = line.startswith("  ")
        if line.startswith("- "):
            if state == "code":
                out.append("```")
                out.append("")
            out.append(_escape(line))
            state = "list"
        elif indented and state == "list":
            out.append("  " + _escape(line.strip()))
        elif indented:
            if state != "code":
                if out and out[-1] != "":
                    out.append("")
                out.append("```")
                state = "code"
            out.append(line)
        else:
            if state == "code":
                out.append("```")
                out.append("")
            elif state == "list":
                out.append("")
            out.append(_escape(line))
            state = "para"
    if state == "code":
        out.append("```")
    return "\n".join(out).strip("\n")


def _one_line(text):
    """A comment joined into one line (for a list item)."""
    return _escape(" ".join(part.strip() for part in text.split("\n")
                            if part.strip()))


def slug(heading):
    """GitHub's anchor for a Markdown heading (github-slugger)."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


class _Types:
    """Known message and enum names -> their anchors in the page."""

    def __init__(self, files):
        self.anchor = {}
        for f in files:
            for t in f.order:
                self.anchor[t.name] = slug(t.name)

    def link(self, type_name, scope=""):
        """`type_name` as a link when it is one of ours."""
        name = type_name
        if name.startswith("shardd.v1."):
            name = name[len("shardd.v1."):]
        # Resolution as protoc does it: innermost scope first.
        parts = scope.split(".") if scope else []
        for i in range(len(parts), -1, -1):
            candidate = ".".join(parts[:i] + [name])
            if candidate in self.anchor:
                return f"[`{type_name}`](#{self.anchor[candidate]})"
        m = re.match(r"map<(\w+), ([\w.]+)>", type_name)
        if m:
            return f"`map<{m.group(1)}, `{self.link(m.group(2), scope)}`>`"
        return f"`{type_name}`"


def _render_type(t, types, out):
    kind = "enum" if isinstance(t, Enum) else "message"
    out.append(f"### {t.name}")
    out.append("")
    out.append(f"*{kind}*" + (f". {render_comment(t.doc)}"
                              if t.doc and "\n" not in t.doc.strip() and
                              not t.doc.startswith(("- ", "  ")) else ""))
    if t.doc and ("\n" in t.doc.strip() or t.doc.startswith(("- ", "  "))):
        out.append("")
        out.append(render_comment(t.doc))
    out.append("")
    if isinstance(t, Enum):
        for v in t.values:
            doc = f": {_one_line(v.doc)}" if v.doc else ""
            out.append(f"- `{v.name}` = {v.number}{doc}")
    else:
        scope = t.name
        oneofs_seen = set()
        for fld in t.fields:
            label = f"{fld.label} " if fld.label else ""
            where = ""
            if fld.oneof:
                where = f", oneof `{fld.oneof}`"
                oneofs_seen.add(fld.oneof)
            doc = f": {_one_line(fld.doc)}" if fld.doc else ""
            out.append(f"- `{fld.name}` ({label}{types.link(fld.type, scope)}"
                       f", {fld.number}{where}){doc}")
        if not t.fields:
            out.append("No fields.")
    out.append("")


def render_api(files, title_of=None):
    """The generated part of docs/api.md for the parsed `files`.

    `files`: ProtoFile objects; services come first (in file order), then
    each file's messages and enums under the file's name.
    """
    types = _Types(files)
    out = []
    for f in files:
        if os.path.basename(f.path) == "common.proto" and f.header:
            out.append("## Conventions of every service")
            out.append("")
            out.append(f"From the header of `{f.path}`.")
            out.append("")
            out.append(render_comment(f.header))
            out.append("")
    for f in files:
        for s in f.services:
            out.append(f"## {s.name} service")
            out.append("")
            out.append(f"Defined in `{f.path}`.")
            out.append("")
            if s.doc:
                out.append(render_comment(s.doc))
                out.append("")
            for r in s.rpcs:
                out.append(f"- [{s.name}.{r.name}](#{slug(s.name + '.' + r.name)})")
            out.append("")
            for r in s.rpcs:
                out.append(f"### {s.name}.{r.name}")
                out.append("")
                req = ("stream " if r.request_stream else "") + types.link(
                    r.request)
                resp = ("stream " if r.response_stream else "") + types.link(
                    r.response)
                out.append(f"`rpc {r.name}` ({req}) returns ({resp})")
                out.append("")
                if r.doc:
                    out.append(render_comment(r.doc))
                    out.append("")
    for f in files:
        if not f.order:
            continue
        out.append(f"## Messages and enums of {os.path.basename(f.path)}")
        out.append("")
        section = ""
        for t in f.order:
            if t.section and t.section != section:
                section = t.section
                out.append(f"**{_escape(section)}**")
                out.append("")
            _render_type(t, types, out)
    return "\n".join(out).rstrip("\n") + "\n"
