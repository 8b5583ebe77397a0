"""Generate the learner edition of the book: ``learner/<name>.ipynb`` for every ``book/<name>.ipynb``.

    python book/_ext/editions.py            # (re)write learner/
    python book/_ext/editions.py --check    # exit 1, listing the files, when learner/ is stale
    python book/_ext/editions.py --out DIR  # write the edition somewhere else

The book (``book/``) shows every exercise with its solution in a dropdown. The learner edition is the same
notebooks with the solutions taken out, for JupyterLab and Colab, which know nothing of MyST:

1. every cell tagged ``solution`` is removed with nbconvert's ``TagRemovePreprocessor`` (the tags are checked
   first: every cell from a ``{solution-start}`` marker to its ``{solution-end}`` marker carries the tag, and no
   other cell does, so a missing tag fails here instead of leaking a solution);
2. every markdown cell is rewritten into plain Markdown: directives (``{exercise}``, admonitions, figures, ...),
   roles (``{doc}``, ``{cite}``, ``{math}``, ``{ref}``, ``{term}``, ...), targets, comments and option lines;
3. code cells are renumbered 1...N, as after one clean run;
4. a chapter with exercises gets a last code cell, ``progress(...)``, that lists which of its exercises pass
   in the learner's kernel (it has no stored output).

Everything else (stubs, demonstrations, their stored outputs, cell ids, the notebook's metadata) is kept, and
the output is a function of the input alone: running the generator twice changes no byte.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import nbformat
import yaml
from nbconvert.preprocessors import TagRemovePreprocessor

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
LEARNER = ROOT / "learner"

SOLUTION_TAG = "solution"
PROGRESS_CELL_ID = "learner-progress"
PROGRESS_HEADER = "# Which of this chapter's exercises pass in this kernel? Run it again after solving one."
MAX_LINE = 88


class _Pad(str):
    """A blank line that a translated block puts around itself; dropped where a blank line is already."""


PAD = _Pad()


class EditionError(Exception):
    """The book does not follow the exercise format, or uses MyST the generator cannot translate."""


# --- MyST syntax ------------------------------------------------------------------------------------------------

FENCE_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
DIRECTIVE_INFO = re.compile(r"^\{(?P<name>[A-Za-z][\w:.+-]*)\}\s*(?P<arg>.*?)\s*$")
OPTION = re.compile(r"^\s*:(?P<key>[A-Za-z][\w-]*):(?:\s+(?P<value>.*?))?\s*$")
TARGET = re.compile(r"^\s*\((?P<label>[^()\s]+)\)=\s*$")
COMMENT = re.compile(r"^\s*%")
BLOCK_BREAK = re.compile(r"^\s*\+\+\+(\s.*)?$")
EQ_LABEL = re.compile(r"^(?P<math>.*\$\$)\s*\((?P<label>[^()\s]+)\)\s*$")
DEFINITION = re.compile(r"^:\s{1,3}(?P<text>\S.*)$")
ROLE = re.compile(r"\{(?P<name>[A-Za-z][\w:.+-]*)\}(?P<ticks>`+)(?P<content>.+?)(?<!`)(?P=ticks)(?!`)", re.S)
TICKS = re.compile(r"`+")
LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]\n]*)\]\((?P<target>[^()\s]+)(?P<title>\s+\"[^\"]*\")?\)")
HTML_SRC = re.compile(r"(?P<pre><img\b[^>]*?\bsrc=\")(?P<target>[^\"]+)\"")
EXPLICIT = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", re.S)
HEADING = re.compile(r"^#{1,6}\s+(?P<text>.+?)\s*#*\s*$")
SUBSTITUTION = re.compile(r"\{\{\s*([\w.-]+)\s*\}\}")
CHECKER_CALL = re.compile(r"^\s*(?P<name>check_\w+)\s*\(", re.M)

ADMONITIONS = {
    "note": "Note", "tip": "Tip", "hint": "Hint", "important": "Important", "warning": "Warning",
    "caution": "Caution", "attention": "Attention", "danger": "Danger", "error": "Error", "seealso": "See also",
    "admonition": "", "dropdown": "", "margin": "", "sidebar": "", "aside": "", "topic": "", "epigraph": "",
    "pull-quote": "", "highlights": "", "card": "", "tab-item": "", "grid-item-card": "",
}
UNWRAPPED = {"grid", "grid-item", "tab-set", "div", "container", "only", "cssclass", "rst-class"}
DROPPED = {"bibliography", "toctree", "tableofcontents", "index", "exercise-end", "meta"}
CODE = {"code-block", "code", "sourcecode", "code-cell", "prompt"}
SOLUTIONS = {"solution", "solution-start", "solution-end"}
EXERCISES = {"exercise", "exercise-start"}
TEXT_ROLES = {"term", "abbr", "index", "any", "dfn", "samp", "file", "command", "program", "envvar", "option",
              "title-reference", "emphasis", "strong"}


@dataclass
class Directive:
    name: str
    arg: str
    options: dict[str, str]
    body: list[str]


def split_directive(lines: list[str], start: int, fence: str, info: str) -> tuple[Directive | None, int]:
    """Parse the fenced block opening at ``lines[start]``; return the directive (None for a code fence) and the
    index of the line after its closing fence (CommonMark: a fence left open runs to the end)."""
    char, width = fence[0], len(fence)
    closing = re.compile(rf"^ {{0,3}}{re.escape(char)}{{{width},}}\s*$")
    end = next((j for j in range(start + 1, len(lines)) if closing.match(lines[j])), len(lines))
    m = DIRECTIVE_INFO.match(info.strip())
    if not m:
        return None, end + 1
    body = lines[start + 1:end]
    options: dict[str, str] = {}
    if body and body[0].strip() == "---":  # options as a YAML block
        stop = next((k for k in range(1, len(body)) if body[k].strip() == "---"), None)
        if stop is not None:
            options = {str(k): str(v) for k, v in (yaml.safe_load("\n".join(body[1:stop])) or {}).items()}
            body = body[stop + 1:]
    while body and (o := OPTION.match(body[0])):
        options[o["key"]] = o["value"] or ""
        body = body[1:]
    return Directive(m["name"], m["arg"], options, body), end + 1


def directives(source: str):
    """Every directive of a markdown text, nested ones included, in order."""
    lines, i = source.split("\n"), 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if m:
            d, nxt = split_directive(lines, i, m["fence"], m["info"])
            if d is not None:
                yield d
                yield from directives("\n".join(d.body))
            i = nxt
        else:
            i += 1


def first_heading(markdown: str) -> str | None:
    in_fence = False
    for line in markdown.split("\n"):
        if FENCE_OPEN.match(line):
            in_fence = not in_fence
        elif not in_fence and (m := HEADING.match(line)):
            return m["text"]
    return None


def py_str(s: str) -> str:
    """A double-quoted Python string literal (deterministic, readable)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


# --- what the book knows: titles, labels, references -------------------------------------------------------------


@dataclass
class Book:
    """The facts about book/ that the translation needs (titles of pages, labels, the bibliography)."""

    root: Path = ROOT

    @property
    def book(self) -> Path:
        return self.root / "book"

    @cached_property
    def config(self) -> dict:
        path = self.root / "_config.yml"
        return yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else {}

    def notebooks(self) -> list[Path]:
        """The notebooks of book/; scratch copies (names starting with "_" or ".") are not part of the book."""
        return sorted(p for p in self.book.glob("*.ipynb") if not p.name.startswith(("_", ".")))

    @cached_property
    def _notebooks(self) -> dict[str, nbformat.NotebookNode]:
        return {p.stem: nbformat.read(p, as_version=4) for p in self.notebooks()}

    @cached_property
    def titles(self) -> dict[str, tuple[str, str]]:
        """``stem -> (title, kind)`` for every page of book/, kind "ipynb" or "md"."""
        out: dict[str, tuple[str, str]] = {}
        for stem, nb in self._notebooks.items():
            md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
            out[stem] = (first_heading(md) or stem, "ipynb")
        for p in sorted(self.book.glob("*.md")):
            out.setdefault(p.stem, (first_heading(p.read_text(encoding="utf-8")) or p.stem, "md"))
        return out

    @cached_property
    def labels(self) -> dict[str, tuple[str, str]]:
        """``label -> (page stem, text)`` for targets ``(label)=``, figures' ``:name:`` and exercises' ``:label:``."""
        out: dict[str, tuple[str, str]] = {}
        pages = {stem: "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
                 for stem, nb in self._notebooks.items()}
        pages.update({p.stem: p.read_text(encoding="utf-8") for p in sorted(self.book.glob("*.md"))})
        for stem, text in pages.items():
            lines = text.split("\n")
            for i, line in enumerate(lines):
                if m := TARGET.match(line):
                    heading = next((h["text"] for h in map(HEADING.match, lines[i + 1:]) if h), m["label"])
                    out.setdefault(m["label"], (stem, heading))
            for d in directives(text):
                label = d.options.get("label") or d.options.get("name")
                if label:
                    out.setdefault(label, (stem, d.arg or " ".join(d.body).strip() or label))
        return out

    @cached_property
    def bibliography(self) -> dict[str, tuple[list[str], str]]:
        """``key -> (last names of the authors, year)`` from the book's .bib files."""
        from pybtex.database import parse_file

        files = self.config.get("bibtex_bibfiles") or [str(p.relative_to(self.root))
                                                        for p in sorted(self.book.glob("*.bib"))]
        out: dict[str, tuple[list[str], str]] = {}
        for name in files:
            for key, entry in parse_file(self.root / name, "bibtex").entries.items():
                persons = entry.persons.get("author") or entry.persons.get("editor") or []
                # str() of pybtex's rich text decodes LaTeX ({\L}ukasz, R{\'e}) faster than render_as()
                names = [" ".join(str(n) for n in (*p.rich_prelast_names, *p.rich_last_names)) for p in persons]
                names = [n for n in names if n] or [re.sub(r"[{}]", "", entry.fields.get("title", key))]
                out[key] = (names, entry.fields.get("year", "n.d."))
        return out

    @cached_property
    def toc(self) -> list[str]:
        """The stems of the pages of book/ in the order of _toc.yml (the book's reading order)."""
        path = self.root / "_toc.yml"
        toc = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else {}
        files: list[str] = []

        def walk(entries):
            for entry in entries or []:
                if entry.get("file"):
                    files.append(entry["file"])
                walk(entry.get("chapters"))
                walk(entry.get("sections"))

        if toc.get("root"):
            files.append(toc["root"])
        walk(toc.get("parts"))
        walk(toc.get("chapters"))
        walk(toc.get("sections"))
        stems = [re.sub(r"\.(ipynb|md)$", "", f).removeprefix("book/") for f in files]
        return [s for s in stems if "/" not in s]

    @cached_property
    def exercise_numbers(self) -> dict[str, int]:
        """``stem -> number of its first exercise``: the book numbers exercises through all pages in toc order."""
        out, n = {}, 0
        for stem in self.toc:
            out[stem] = n + 1
            if stem in self._notebooks:
                cells = [c.source for c in self._notebooks[stem].cells
                         if c.cell_type == "markdown" and SOLUTION_TAG not in _tags(c)]
            elif (self.book / f"{stem}.md").is_file():
                cells = [(self.book / f"{stem}.md").read_text(encoding="utf-8")]
            else:
                cells = []
            n += sum(1 for text in cells for d in directives(text)
                     if d.name in EXERCISES and "nonumber" not in d.options)
        return out

    @cached_property
    def substitutions(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in ((self.config.get("parse") or {}).get("myst_substitutions") or {}).items()}

    @cached_property
    def baseurl(self) -> str:
        return str((self.config.get("html") or {}).get("baseurl") or "").rstrip("/")


# --- MyST -> plain Markdown ---------------------------------------------------------------------------------------


@dataclass
class Translator:
    """Rewrites the markdown of one page (``page``: its stem) into Markdown that JupyterLab and Colab render."""

    book: Book
    page: str
    exercise_count: int = 0
    unknown: list[str] = field(default_factory=list)

    def __post_init__(self):
        # the same numbers as the book shows ("Exercise 9", "Solution to Exercise 9"); none outside the toc
        self.first_exercise = self.book.exercise_numbers.get(self.page)

    # blocks

    def markdown(self, source: str) -> str:
        """The cell's source with every MyST construct translated; text without MyST comes back unchanged."""
        kept: list[str] = []
        previous_blank = True  # no padding at the start
        for line in self.block(source.split("\n")):
            blank = line is PAD or not line.strip()
            if line is PAD and previous_blank or (blank and previous_blank and kept and kept[-1] is PAD):
                continue  # padding around a translated block never doubles a blank line
            kept.append(line)
            previous_blank = blank
        while kept and kept[-1] is PAD:
            kept.pop()
        return "\n".join("" if line is PAD else line for line in kept)

    def block(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        chunk: list[str] = []

        def flush():
            if chunk:
                out.extend(self.inline(self.definitions("\n".join(chunk))).split("\n"))
                chunk.clear()

        i = 0
        while i < len(lines):
            line = lines[i]
            m = FENCE_OPEN.match(line)
            if m:
                flush()
                d, nxt = split_directive(lines, i, m["fence"], m["info"])
                out.extend(lines[i:nxt] if d is None else self.directive(d))
                if d is None and nxt > len(lines):  # a code fence left open: CommonMark closes it at the end
                    out.append(m["fence"])
                i = nxt
                continue
            if line.lstrip().startswith("$$") and not EQ_LABEL.match(line) and line.strip().count("$$") == 1:
                # a display-math block over several lines: LaTeX, kept as it is (a label after $$ dropped)
                flush()
                end = next((j for j in range(i + 1, len(lines)) if "$$" in lines[j]), len(lines) - 1)
                last = EQ_LABEL.match(lines[end])
                out.extend(lines[i:end] + [last["math"] if last else lines[end]])
                i = end + 1
                continue
            if TARGET.match(line) or COMMENT.match(line) or BLOCK_BREAK.match(line):
                i += 1
                continue
            if e := EQ_LABEL.match(line):
                line = e["math"]
            chunk.append(line)
            i += 1
        flush()
        return out

    @staticmethod
    def definitions(text: str) -> str:
        """Definition lists (``term`` then ``: definition``) become bullet points."""
        lines = text.split("\n")
        for i in range(1, len(lines)):
            d = DEFINITION.match(lines[i])
            if d and lines[i - 1].strip() and not DEFINITION.match(lines[i - 1]):
                lines[i - 1] = f"- **{lines[i - 1].strip()}**: {d['text']}"
                lines[i] = None  # type: ignore[call-overload]
            elif d and i >= 2 and lines[i - 1] == "" and lines[i - 2] and lines[i - 2].strip():
                lines[i - 2] = f"- **{lines[i - 2].strip()}**: {d['text']}"
                lines[i - 1] = lines[i] = None  # type: ignore[call-overload]
            elif d:
                lines[i] = f"  {d['text']}"
        return "\n".join(line for line in lines if line is not None)

    def directive(self, d: Directive) -> list[str]:
        name = d.name
        if name in SOLUTIONS:
            raise EditionError(f"a {{{name}}} directive is left after removing the cells tagged "
                               f"{SOLUTION_TAG!r}: tag its cell {SOLUTION_TAG!r}")
        if name in EXERCISES:
            number = ""
            if self.first_exercise is not None and "nonumber" not in d.options:
                number = f" {self.first_exercise + self.exercise_count}"
                self.exercise_count += 1
            title = self.inline(d.arg)
            head = f"### Exercise{number}" + (f" ({title})" if title else "")
            return [PAD, head, "", *self.block(d.body), PAD]
        if name in DROPPED:
            return []
        if name in CODE:
            return self.code_fence(d.arg if name != "code-cell" else (d.arg or "python"), d.body)
        if name == "literalinclude":
            return self.literalinclude(d)
        if name == "math":
            return [PAD, "$$", *d.body, "$$", PAD]
        if name in ("figure", "image"):
            alt = d.options.get("alt", "")
            lines = [PAD, f"![{alt}]({self.local_path(d.arg.strip())})", PAD]
            caption = self.block(d.body)
            if any(c.strip() for c in caption):
                lines += [f"*{c.strip()}*" if c.strip() else "" for c in caption] + [PAD]
            return lines
        if name == "raw":
            return [PAD, *d.body, PAD] if d.arg.strip().lower() == "html" else []
        if name in UNWRAPPED:
            return [PAD, *self.block(d.body), PAD]
        if name in ADMONITIONS:
            return self.quote(d.arg or ADMONITIONS[name], d.body)
        # Anything else: keep its title and body as Markdown, and say so once on stderr.
        self.unknown.append(name)
        title = d.arg or name.replace("-", " ").capitalize()
        return [PAD, f"**{self.inline(title)}**", "", *self.block(d.body), PAD]

    def quote(self, title: str, body: list[str]) -> list[str]:
        inner = ([f"**{self.inline(title)}**", PAD] if title else []) + self.block(body)
        while inner and not inner[-1].strip():
            inner.pop()
        return [PAD, *[f"> {line}" if line.strip() else ">" for line in inner], PAD]

    @staticmethod
    def code_fence(language: str, body: list[str]) -> list[str]:
        longest = max((len(m) for line in body for m in TICKS.findall(line)), default=0)
        fence = "`" * max(3, longest + 1)
        return [PAD, fence + language.strip(), *body, fence, PAD]

    def literalinclude(self, d: Directive) -> list[str]:
        unsupported = set(d.options) - {"language", "caption", "linenos", "name"}
        if unsupported:
            raise EditionError(f"literalinclude options {sorted(unsupported)} are not supported in the learner "
                               "edition")
        path = (self.book.book / d.arg.strip()).resolve()
        return self.code_fence(d.options.get("language", ""), path.read_text(encoding="utf-8").rstrip("\n").split("\n"))

    # inline

    def inline(self, text: str) -> str:
        out, i = [], 0
        while i < len(text):
            ch = text[i]
            if ch == "{" and (m := ROLE.match(text, i)):
                out.append(self.role(m["name"], m["content"]))
                i = m.end()
            elif ch == "`":
                run = TICKS.match(text, i).group(0)
                close = re.compile(rf"(?<!`){run}(?!`)").search(text, i + len(run))
                stop = close.end() if close else i + len(run)
                out.append(text[i:stop])
                i = stop
            elif ch == "\\":
                out.append(text[i:i + 2])
                i += 2
            elif ch in "![" and (m := LINK.match(text, i)):
                out.append(self.link(m["bang"], self.inline(m["text"]), m["target"], m["title"] or ""))
                i = m.end()
            elif ch == "<" and (m := HTML_SRC.match(text, i)):
                out.append(f'{m["pre"]}{self.local_path(m["target"])}"')
                i = m.end()
            elif ch == "{" and (m := SUBSTITUTION.match(text, i)) and m[1] in self.book.substitutions:
                out.append(self.inline(self.book.substitutions[m[1]]))
                i = m.end()
            else:
                out.append(ch)
                i += 1
        return "".join(out)

    def role(self, name: str, content: str) -> str:
        content = " ".join(content.split())
        explicit = EXPLICIT.match(content)
        text, target = (explicit["text"], explicit["target"]) if explicit else (None, content)
        if name == "doc":
            return self.doc_link(target, text)
        if name == "cite" or name.startswith("cite:"):
            return self.cite(name.partition(":")[2] or "p", content)
        if name in ("math", "eq"):
            return f"${content}$" if name == "math" else f"({content})"
        if name in ("ref", "numref"):
            return self.ref(target, text)
        if name == "download":
            return f"[{text or Path(target).name}]({self.local_path(target)})"
        if name in ("sub", "sup", "kbd"):
            return f"<{name}>{content}</{name}>"
        if name in ("code", "literal"):
            return f"`{content}`"
        if name in ("guilabel", "menuselection"):
            return "**" + content.replace("-->", "→").replace("&", "") + "**"
        if name in TEXT_ROLES:
            return (text or target).lstrip("!")
        self.unknown.append("{" + name + "}")
        return text or target

    def doc_link(self, target: str, text: str | None) -> str:
        stem, _, anchor = target.strip().lstrip("/").removeprefix("book/").partition("#")
        stem = re.sub(r"\.(ipynb|md)$", "", stem)
        if stem not in self.book.titles:
            raise EditionError(f"{{doc}}`{target}` names no page of book/")
        title, kind = self.book.titles[stem]
        text = text or title
        if kind == "ipynb":
            return f"[{text}]({stem}.ipynb{'#' + anchor if anchor else ''})"
        if self.book.baseurl:
            return f"[{text}]({self.book.baseurl}/book/{stem}.html)"
        return f"*{text}*"

    def ref(self, label: str, text: str | None) -> str:
        if label not in self.book.labels:
            raise EditionError(f"{{ref}}`{label}` names no label of book/")
        stem, title = self.book.labels[label]
        text = self.inline(text or title)
        if stem == self.page or self.book.titles.get(stem, ("", ""))[1] != "ipynb":
            return f"*{text}*"
        return f"[{text}]({stem}.ipynb)"

    def cite(self, style: str, content: str) -> str:
        keys = [k.strip() for k in content.split(",") if k.strip()]
        missing = [k for k in keys if k not in self.book.bibliography]
        if missing:
            raise EditionError(f"{{cite}} keys {missing} are not in the bibliography")

        def who(key: str, full: bool = False) -> str:
            names = self.book.bibliography[key][0]
            if full or len(names) <= 2:
                return " and ".join(names) if len(names) <= 2 else ", ".join(names[:-1]) + ", and " + names[-1]
            return f"{names[0]} et al."

        def year(key: str) -> str:
            return self.book.bibliography[key][1]

        full = style.endswith("s") and style != "s"
        style = style.rstrip("s") if full else style
        if style == "t":
            return ", ".join(f"{who(k, full)} ({year(k)})" for k in keys)
        if style == "author":
            return ", ".join(who(k, full) for k in keys)
        if style == "year":
            return ", ".join(year(k) for k in keys)
        if style in ("alp", "alt"):
            return "; ".join(f"{who(k, full)}, {year(k)}" for k in keys)
        if style in ("label", "empty"):
            return ""
        return "(" + "; ".join(f"{who(k, full)}, {year(k)}" for k in keys) + ")"

    def link(self, bang: str, text: str, target: str, title: str) -> str:
        """A Markdown link or image: pages of book/ as {doc} does, other relative paths into book/."""
        path, _, anchor = target.partition("#")
        if not re.match(r"^([a-z][\w+.-]*:|/)", target) and path.endswith((".md", ".ipynb")) and \
                (self.book.book / path).is_file() and not bang:
            return self.doc_link(path + ("#" + anchor if anchor else ""), text)
        return f"{bang}[{text}]({self.local_path(target)}{title})"

    def local_path(self, target: str) -> str:
        """A path relative to book/ seen from learner/ (files that are not notebooks stay in book/)."""
        if re.match(r"^([a-z][\w+.-]*:|#)", target) or target.startswith("/"):
            return target
        return "../book/" + target


# --- the learner edition of one notebook --------------------------------------------------------------------------


@dataclass(frozen=True)
class Exercise:
    title: str
    checker: str


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _names(cell) -> set[str]:
    return {d.name for d in directives(cell.source)} if cell.cell_type == "markdown" else set()


def check_solution_tags(nb, where: str) -> None:
    """Every cell from a solution-start marker to its solution-end marker is tagged, and no other cell is."""
    inside = None
    for i, cell in enumerate(nb.cells):
        names, tagged = _names(cell), SOLUTION_TAG in _tags(cell)
        raw = cell.source
        for marker in ("solution-start", "solution-end", "solution"):
            if re.search(r"^\s*(`{3,}|~{3,}|:{3,})\s*\{" + marker + r"\}", raw, re.M) and not tagged:
                raise EditionError(f"{where}: cell {i} holds a {{{marker}}} marker but is not tagged "
                                   f"{SOLUTION_TAG!r}; the learner edition would show the solution")
        if "solution-start" in names:
            if inside is not None:
                raise EditionError(f"{where}: cell {i} starts a solution inside the solution started at cell {inside}")
            inside = i
        if inside is not None and not tagged:
            raise EditionError(f"{where}: cell {i} lies inside the solution started at cell {inside} but is not "
                               f"tagged {SOLUTION_TAG!r}; the learner edition would show it")
        if inside is None and tagged and "solution" not in names:
            raise EditionError(f"{where}: cell {i} is tagged {SOLUTION_TAG!r} but lies outside every "
                               "solution-start/solution-end pair; the learner edition would lose it")
        if "solution-end" in names:
            if inside is None:
                raise EditionError(f"{where}: cell {i} ends a solution that never started")
            inside = None
    if inside is not None:
        raise EditionError(f"{where}: the solution started at cell {inside} has no solution-end marker")


def checker_called(source: str) -> str | None:
    """The last ``check_…(...)`` call at the top level of a stub cell."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        names = [m["name"] for m in CHECKER_CALL.finditer(source)]
        return names[-1] if names else None
    calls = [node.value.func.id for node in tree.body
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
             and isinstance(node.value.func, ast.Name) and node.value.func.id.startswith("check_")]
    return calls[-1] if calls else None


def find_exercises(nb, where: str) -> list[Exercise]:
    """Each exercise's title and the checker its stub (the cell right after it) calls."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown" or SOLUTION_TAG in _tags(cell):
            continue
        for d in directives(cell.source):
            if d.name not in EXERCISES:
                continue
            stub = nb.cells[i + 1] if i + 1 < len(nb.cells) else None
            name = checker_called(stub.source) if stub is not None and stub.cell_type == "code" else None
            if name is None or SOLUTION_TAG in _tags(stub):
                raise EditionError(f"{where}: exercise {d.arg!r} (cell {i}) must be followed by its stub, a code "
                                   "cell ending with the checker call check_…(...)")
            found.append(Exercise(" ".join(d.arg.replace("`", "").split()), name))
    return found


def progress_cell(exercises: list[Exercise]):
    lines = [PROGRESS_HEADER, "from attnlib.checks import progress", "", "progress("]
    for e in exercises:
        one = f"    ({py_str(e.title)}, {py_str(e.checker)}),"
        lines += [one] if len(one) <= MAX_LINE else ["    (", f"        {py_str(e.title)},",
                                                      f"        {py_str(e.checker)},", "    ),"]
    lines.append(")")
    cell = nbformat.v4.new_code_cell("\n".join(lines))
    cell.id = PROGRESS_CELL_ID
    return cell


def learner_notebook(path: Path, book: Book | None = None) -> str:
    """The learner edition of the notebook at ``path``, as the text nbformat writes."""
    book = book or Book(path.resolve().parents[1])
    where = path.name
    nb = nbformat.read(path, as_version=4)
    check_solution_tags(nb, where)
    exercises = find_exercises(nb, where)

    nb, _ = TagRemovePreprocessor(remove_cell_tags={SOLUTION_TAG}).preprocess(nb, {})

    translator = Translator(book, path.stem)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = translator.markdown(cell.source)
    if translator.unknown:
        print(f"{where}: translated unknown MyST {sorted(set(translator.unknown))} generically", file=sys.stderr)

    count = 0
    for cell in nb.cells:
        if cell.cell_type == "code":
            count += 1
            cell.execution_count = count
            for out in cell.outputs:
                if out.output_type == "execute_result":
                    out.execution_count = count
    if exercises:
        nb.cells.append(progress_cell(exercises))

    nbformat.validate(nb)
    buffer = io.StringIO()
    nbformat.write(nb, buffer)
    return buffer.getvalue()


# --- the whole edition --------------------------------------------------------------------------------------------


def edition(root: Path = ROOT) -> dict[str, str]:
    """``file name -> text`` of every file of the learner edition."""
    book = Book(root)
    return {p.name: learner_notebook(p, book) for p in book.notebooks()}


def stale(out: Path, files: dict[str, str]) -> list[str]:
    """Files of ``out`` that differ from ``files``, are missing, or have no notebook in book/ any more."""
    wrong = [name for name, text in files.items()
             if not (out / name).is_file() or (out / name).read_bytes() != text.encode("utf-8")]
    extra = [p.name for p in sorted(out.glob("*.ipynb")) if p.name not in files] if out.is_dir() else []
    return sorted(wrong + extra)


def write(out: Path, files: dict[str, str]) -> list[str]:
    """Write the edition into ``out``: only files whose bytes change; notebooks without a source go."""
    changed = stale(out, files)
    out.mkdir(parents=True, exist_ok=True)
    for name in changed:
        if name in files:
            (out / name).write_bytes(files[name].encode("utf-8"))
        else:
            (out / name).unlink()
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1, listing the files, when the edition is stale")
    parser.add_argument("--out", type=Path, default=LEARNER, help="the folder of the edition (default: learner/)")
    args = parser.parse_args(argv)
    try:
        files = edition(ROOT)
    except EditionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = args.out.resolve()
    shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    if args.check:
        names = stale(out, files)
        if names:
            print(f"{shown}/ is stale; run `make learner` (python book/_ext/editions.py):", file=sys.stderr)
            for name in names:
                print(f"  {shown}/{name}", file=sys.stderr)
            return 1
        print(f"{shown}/ is up to date ({len(files)} notebooks)")
        return 0
    changed = write(out, files)
    for name in changed:
        print(f"{'wrote' if name in files else 'removed'} {shown}/{name}")
    print(f"{shown}/: {len(files)} notebooks, {len(changed)} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
