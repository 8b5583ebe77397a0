"""Generate the learner edition of the book: ``learner/<name>.ipynb`` for every ``book/<name>.ipynb``.

    python tools/editions.py            # (re)write learner/
    python tools/editions.py --check    # exit 1, listing the files, when learner/ is stale
    python tools/editions.py --out DIR  # write the edition somewhere else

The book (``book/``) shows every exercise with its solution in a dropdown. The learner edition is the same
notebooks with the solutions taken out, for JupyterLab and Colab, which know nothing of MyST:

1. every cell tagged ``solution`` is removed with nbconvert's ``TagRemovePreprocessor`` (the tags are checked
   first: every cell from a ``{solution-start}`` marker to its ``{solution-end}`` marker carries the tag, and no
   other cell does, so a missing tag fails here instead of leaking a solution);
2. every other markdown cell is parsed with MyST's own parser (markdown-it-py and the mdit-py-plugins that
   myst-parser enables for ``_config.yml``) and its MyST rewritten into plain Markdown. Only the syntax the book
   uses is translated: the tables ``DIRECTIVES`` and ``ROLES`` list it, one entry each (the first exercise of a
   page also gets ``TIME_RULE``). Any other MyST is an
   error that names the notebook and the cell. Plain Markdown is copied byte for byte;
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
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, cached_property, partial
from pathlib import Path

import nbformat
import yaml
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from mdit_py_plugins.myst_role.index import myst_role
from myst_parser.config.main import MdParserConfig
from myst_parser.parsers.mdit import create_md_parser
from nbconvert.preprocessors import TagRemovePreprocessor
from sphinx_external_toc.api import FileItem
from sphinx_external_toc.parsing import parse_toc_yaml

ROOT = Path(__file__).resolve().parents[1]
LEARNER = ROOT / "learner"

SOLUTION_TAG = "solution"
PROGRESS_CELL_ID = "learner-progress"
PROGRESS_HEADER = "# Which of this chapter's exercises pass in this kernel? Run it again after solving one."
MAX_LINE = 88
# Under the first exercise of each learner notebook (how_to_use says the same in the book).
TIME_RULE = "*If an exercise takes twice its minutes, read its solution in the book and move on.*"
EDITION_WORDS = {"exercise": "Exercise", "time_rule": TIME_RULE, "book_path": "../book/"}
CHECKER_CALL = re.compile(r"^\s*(?P<name>check_\w+)\s*\(", re.M)  # exercise checkers (validators are require_…)


class EditionError(Exception):
    """The book does not follow the exercise format, or uses MyST the generator does not translate."""


class _Pad(str):
    """A blank line that a translated directive puts around itself; dropped where a blank line is already."""


PAD = _Pad()


# --- parsing: MyST's own parser -----------------------------------------------------------------------------------


@cache
def markdown_parser() -> MarkdownIt:
    """The markdown-it parser that myst-parser builds for the book's ``_config.yml``; each role token also
    keeps its source text (``meta["raw"]``), so that the translation can replace it in place."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    extensions = set((config.get("parse") or {}).get("myst_enable_extensions") or [])
    md = create_md_parser(MdParserConfig(enable_extensions=extensions), RendererHTML)

    def role_with_source(state, silent: bool) -> bool:
        start = state.pos
        found = myst_role(state, silent)
        if found and not silent:
            state.tokens[-1].meta["raw"] = state.src[start:state.pos]
        return found

    md.inline.ruler.at("myst_role", role_with_source)
    return md


@dataclass
class Directive:
    """A fenced ``{name} arg`` block: its ``:key: value`` option lines, then the body (MyST again)."""

    name: str
    arg: str
    options: dict[str, str]
    body: list[str]


DIRECTIVE_INFO = re.compile(r"^\{(?P<name>[^{}\s]+)\}\s*(?P<arg>.*?)\s*$")
OPTION = re.compile(r"^\s*:(?P<key>[A-Za-z][\w-]*):(?:\s+(?P<value>.*?))?\s*$")


def as_directive(token: Token) -> Directive | None:
    """The directive a fence token holds, or None for a fence of code."""
    m = DIRECTIVE_INFO.match(token.info.strip()) if token.type in ("fence", "colon_fence") else None
    if not m:
        return None
    body = token.content.removesuffix("\n").split("\n") if token.content else []
    options: dict[str, str] = {}
    while body and (o := OPTION.match(body[0])):
        options[o["key"]] = o["value"] or ""
        body = body[1:]
    return Directive(m["name"], m["arg"], options, body)


def directives(source: str):
    """Every directive of a markdown text, nested ones included, in order."""
    for token in markdown_parser().parse(source):
        if d := as_directive(token):
            yield d
            yield from directives("\n".join(d.body))


def first_heading(source: str) -> str | None:
    """The text of the first heading of a markdown text."""
    tokens = markdown_parser().parse(source)
    return next((tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"), None)


def py_str(s: str) -> str:
    """A double-quoted Python string literal (deterministic, readable)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


# --- what the book knows: pages, their order, the bibliography -------------------------------------------------


@dataclass
class Book:
    """The facts about book/ that the translation needs (titles of pages, their order, the bibliography)."""

    root: Path = ROOT
    words: dict | None = None
    """What the edition writes itself, and where it sees book/'s files from: EDITION_WORDS, or a translation's."""

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

    def _markdown(self, stem: str) -> list[str]:
        """The markdown of a page that the learner sees: a notebook's cells without solutions, or the .md file."""
        if stem in self._notebooks:
            return [c.source for c in self._notebooks[stem].cells
                    if c.cell_type == "markdown" and SOLUTION_TAG not in _tags(c)]
        path = self.book / f"{stem}.md"
        return [path.read_text(encoding="utf-8")] if path.is_file() else []

    @cached_property
    def titles(self) -> dict[str, tuple[str, str]]:
        """``stem -> (title, kind)`` for every page of book/, kind "ipynb" or "md"."""
        out = {stem: (next(filter(None, (first_heading(c.source) for c in nb.cells if c.cell_type == "markdown")),
                           stem), "ipynb") for stem, nb in self._notebooks.items()}
        for p in sorted(self.book.glob("*.md")):
            out.setdefault(p.stem, (first_heading(p.read_text(encoding="utf-8")) or p.stem, "md"))
        return out

    @cached_property
    def labels(self) -> dict[str, tuple[str, str, str]]:
        """``label -> (stem, heading, kind)`` for every ``(label)=`` that stands above a heading in book/."""
        pages = {stem: ("ipynb", self._markdown(stem)) for stem in self._notebooks}
        for p in sorted(self.book.glob("*.md")):
            pages.setdefault(p.stem, ("md", [p.read_text(encoding="utf-8")]))
        out = {}
        for stem, (kind, texts) in pages.items():
            for text in texts:
                for m in LABEL_ABOVE_HEADING.finditer(text):
                    out[m["label"]] = (stem, m["heading"].strip(), kind)
        return out | self.exercise_labels

    @cached_property
    def exercise_labels(self) -> dict[str, tuple[str, str, str]]:
        """``label -> (stem, heading, "ipynb")`` for every exercise: the heading the edition gives it."""
        word, out = (self.words or EDITION_WORDS)["exercise"], {}
        for stem in self._notebooks:
            first = self.exercise_numbers.get(stem)
            found = [d for text in self._markdown(stem) for d in directives(text) if d.name == "exercise"]
            for k, d in enumerate(found):
                if "label" in d.options:
                    number = "" if first is None else f" {first + k}"
                    out[d.options["label"]] = (stem, f"{word}{number} ({d.arg.strip()})", "ipynb")
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
        if not path.exists():
            return []
        site = parse_toc_yaml(path)
        order: list[str] = []

        def walk(docname: str):
            order.append(docname)
            for tree in site[docname].subtrees:
                for item in tree.items:
                    if isinstance(item, FileItem):  # a page (not a glob or a URL)
                        walk(item)

        walk(site.root.docname)
        stems = [d.removeprefix("book/") for d in order]
        return [s for s in stems if "/" not in s]

    @cached_property
    def exercise_numbers(self) -> dict[str, int]:
        """``stem -> number of its first exercise``: the book numbers exercises through all pages in toc order."""
        out, n = {}, 0
        for stem in self.toc:
            out[stem] = n + 1
            n += sum(d.name == "exercise" for text in self._markdown(stem) for d in directives(text))
        return out

    @cached_property
    def baseurl(self) -> str:
        return str((self.config.get("html") or {}).get("baseurl") or "").rstrip("/")


# --- MyST -> plain Markdown ---------------------------------------------------------------------------------------

# Token types of plain Markdown (CommonMark, tables, $-math): copied as they are.
PLAIN_BLOCKS = {
    "paragraph_open", "paragraph_close", "heading_open", "heading_close", "blockquote_open", "blockquote_close",
    "bullet_list_open", "bullet_list_close", "ordered_list_open", "ordered_list_close", "list_item_open",
    "list_item_close", "table_open", "table_close", "thead_open", "thead_close", "tbody_open", "tbody_close",
    "tr_open", "tr_close", "th_open", "th_close", "td_open", "td_close", "hr", "code_block", "fence", "math_block",
}
PLAIN_INLINE = {"text", "softbreak", "hardbreak", "code_inline", "math_inline", "em_open", "em_close",
                "strong_open", "strong_close", "link_close"}
URL = re.compile(r"^[a-z][\w+.-]*:")
LABEL_ABOVE_HEADING = re.compile(r"^\((?P<label>[\w-]+)\)=\s*\n(?:\s*\n)*#+ (?P<heading>.+)$", re.M)


@dataclass
class Translator:
    """Rewrites the markdown of one page (``page``: its stem) into Markdown that JupyterLab and Colab render."""

    book: Book
    page: str
    exercise_count: int = 0  # exercises translated so far on this page

    def markdown(self, source: str) -> str:
        """The cell's source with every MyST construct translated; text without MyST comes back unchanged."""
        kept: list[str] = []
        previous_blank = True  # no padding at the start
        for line in self.block(source):
            blank = line is PAD or not line.strip()
            if line is PAD and previous_blank or (blank and previous_blank and kept and kept[-1] is PAD):
                continue  # padding around a translated block never doubles a blank line
            kept.append(line)
            previous_blank = blank
        while kept and kept[-1] is PAD:
            kept.pop()
        return "\n".join("" if line is PAD else line for line in kept)

    def block(self, source: str) -> list[str]:
        """The lines of ``source``: each directive replaced by its translation, each role translated in place."""
        lines = source.split("\n")
        edits: list[tuple[int, int, list[str]]] = []  # (first line, line after, new lines)
        inlines: dict[tuple[int, int], list[Token]] = {}  # the cells of a table row share their lines
        for token in markdown_parser().parse(source):
            if d := as_directive(token):
                if token.level:
                    raise EditionError(f"line {token.map[0] + 1}: write the {{{d.name}}} directive as a fence "
                                       "at the top level (not in a list or a quote)")
                edits.append((*token.map, self.directive(d)))
            elif token.type == "inline":
                inlines.setdefault(tuple(token.map), []).append(token)
            elif token.type == "myst_target":   # a label for {ref}: the learner edition links the heading below it
                edits.append((*token.map, []))
            elif token.type not in PLAIN_BLOCKS:
                raise unknown(token.type, lines[token.map[0]] if token.map else token.markup)
        for (first, after), tokens in inlines.items():
            edits.append((first, after, self.inline("\n".join(lines[first:after]), tokens).split("\n")))
        out, at = [], 0
        for first, after, new in sorted(edits, key=lambda edit: edit[0]):
            out += lines[at:first] + new
            at = after
        return out + lines[at:]

    def inline(self, text: str, tokens: list[Token] | None = None) -> str:
        """``text`` (the source of ``tokens``, inline ones; parsed here when not given) with its roles translated."""
        roles: dict[str, Token] = {}
        found: Counter[str] = Counter()
        for child in (c for t in tokens or markdown_parser().parseInline(text) for c in t.children or []):
            if child.type == "myst_role":
                roles[child.meta["raw"]] = child
                found[child.meta["raw"]] += 1
            elif child.type in ("link_open", "image"):
                target = child.attrs.get("href" if child.type == "link_open" else "src", "")
                if not URL.match(str(target)):
                    raise unknown(f"{child.type} (a relative target)", str(target))
            elif child.type not in PLAIN_INLINE:
                raise unknown(child.type, child.content or child.markup)
        for raw, role in roles.items():
            if text.count(raw) != found[raw]:  # also as literal text, or split over indented lines
                raise EditionError(f"cannot place the role {raw!r} in its source; write it on one line, once")
            text = text.replace(raw, self.role(role.meta["name"], " ".join(role.content.split())))
        return text

    def directive(self, d: Directive) -> list[str]:
        if d.name not in DIRECTIVES:
            raise unknown("directive", f"{{{d.name}}}")
        allowed, translate = DIRECTIVES[d.name]
        if set(d.options) - allowed:
            raise unknown(f"option of {{{d.name}}}", " ".join(f":{o}:" for o in sorted(set(d.options) - allowed)))
        return translate(self, d)

    def role(self, name: str, content: str) -> str:
        if name not in ROLES:
            raise unknown("role", f"{{{name}}}")
        return ROLES[name](self, content)

    # the translations of the directives

    def exercise(self, d: Directive) -> list[str]:
        """``### Exercise 9 (Title)``, with the number the book shows (none outside the toc)."""
        first = self.book.exercise_numbers.get(self.page)
        number = "" if first is None else f" {first + self.exercise_count}"
        words = self.book.words or EDITION_WORDS
        rule = [words["time_rule"], ""] if self.exercise_count == 0 else []
        self.exercise_count += 1
        title = self.inline(d.arg)
        return [PAD, f"### {words['exercise']}{number}" + (f" ({title})" if title else ""), "", *rule,
                *self.block("\n".join(d.body)), PAD]

    def solution_marker(self, d: Directive) -> list[str]:
        raise EditionError(f"a {{{d.name}}} marker is left after removing the cells tagged {SOLUTION_TAG!r}: "
                           f"tag its cell {SOLUTION_TAG!r}")

    def image(self, d: Directive) -> list[str]:
        book_path = (self.book.words or EDITION_WORDS)["book_path"]
        return [PAD, f"![{d.options.get('alt', '')}]({local_path(d.arg, book_path)})", PAD]

    def figure(self, d: Directive) -> list[str]:
        """The image, then its caption in italics."""
        caption = self.block("\n".join(d.body))
        if not any(line.strip() for line in caption):
            return self.image(d)
        return [*self.image(d), *[f"*{c.strip()}*" if c.strip() else "" for c in caption], PAD]

    def dropped(self, d: Directive) -> list[str]:
        return []

    def admonition(self, d: Directive) -> list[str]:
        """A quoted box: its title in bold, then its text."""
        body = self.block("\n".join(d.body))
        return [PAD, f"> **{self.inline(d.arg)}**", ">", *[f"> {line}" if line.strip() else ">" for line in body],
                PAD]

    # the translations of the roles

    def doc(self, target: str) -> str:
        """A link to the learner edition's notebook, or the title of a page that is not a notebook."""
        if target not in self.book.titles:
            raise EditionError(f"{{doc}}`{target}` names no page of book/")
        title, kind = self.book.titles[target]
        if kind == "ipynb":
            return f"[{title}]({target}.ipynb)"
        return f"[{title}]({self.book.baseurl}/book/{target}.html)" if self.book.baseurl else f"*{title}*"

    def ref(self, target: str) -> str:
        """A link to the section that ``(target)=`` labels: its heading, in the learner edition's notebook."""
        if target not in self.book.labels:
            raise EditionError(f"{{ref}}`{target}` names no label of book/ (write `(label)=` above a heading)")
        stem, heading, kind = self.book.labels[target]
        if kind == "ipynb":
            page = "" if stem == self.page else f"{stem}.ipynb"
            return f"[{heading}]({page}#{heading.replace(' ', '-')})"
        title = self.book.titles[stem][0]
        return f"[{heading}]({self.book.baseurl}/book/{stem}.html#{target})" if self.book.baseurl else f"*{title}*"

    def cite(self, content: str, textual: bool = False) -> str:
        """``(Vaswani et al., 2017)``, or ``Vaswani et al. (2017)`` when ``textual`` (``{cite:t}``)."""
        keys = [k.strip() for k in content.split(",") if k.strip()]
        missing = [k for k in keys if k not in self.book.bibliography]
        if missing:
            raise EditionError(f"{{cite}} keys {missing} are not in the bibliography")
        names = {k: self.book.bibliography[k][0] for k in keys}
        who = {k: " and ".join(n) if len(n) <= 2 else f"{n[0]} et al." for k, n in names.items()}
        year = {k: self.book.bibliography[k][1] for k in keys}
        if textual:
            return ", ".join(f"{who[k]} ({year[k]})" for k in keys)
        return "(" + "; ".join(f"{who[k]}, {year[k]}" for k in keys) + ")"


# The whitelist: exactly the MyST the book uses. Add syntax one tested entry at a time (tests/test_learner_edition.py).
DirectiveRule = tuple[set[str], Callable[[Translator, Directive], list[str]]]  # (allowed options, translation)
DIRECTIVES: dict[str, DirectiveRule] = {
    "exercise": ({"label"}, Translator.exercise),
    "solution-start": ({"class"}, Translator.solution_marker),  # removed with its cell
    "solution-end": (set(), Translator.solution_marker),
    "image": ({"alt", "width"}, Translator.image),
    "figure": ({"name", "alt", "width"}, Translator.figure),
    "bibliography": ({"all"}, Translator.dropped),
    "admonition": ({"class"}, Translator.admonition),
}
ROLES: dict[str, Callable[[Translator, str], str]] = {
    "doc": Translator.doc,
    "ref": Translator.ref,
    "cite": Translator.cite,
    "cite:t": partial(Translator.cite, textual=True),
}


def unknown(kind: str, text: str) -> EditionError:
    """The error for syntax outside the whitelist: what it is (a token type, "role", ...) and its text."""
    return EditionError(f"{kind} {text.strip()!r} is not syntax the learner edition translates; write plain "
                        "Markdown, or add a tested entry to editions.DIRECTIVES or editions.ROLES")


def local_path(target: str, book_path: str = "../book/") -> str:
    """A path relative to book/ seen from the edition's folder (files that are not notebooks stay in book/)."""
    target = target.strip()
    return target if URL.match(target) or target.startswith(("/", "#")) else book_path + target


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
        for marker in sorted(names & {"solution-start", "solution-end", "solution"}):
            if not tagged:
                raise EditionError(f"{where}: cell {i} holds a {{{marker}}} marker but is not tagged "
                                   f"{SOLUTION_TAG!r}; the learner edition would show the solution")
        if "solution-start" in names:
            if inside is not None:
                raise EditionError(f"{where}: cell {i} starts a solution inside the solution started at cell {inside}")
            inside = i
        if inside is not None and not tagged:
            raise EditionError(f"{where}: cell {i} lies inside the solution started at cell {inside} but is not "
                               f"tagged {SOLUTION_TAG!r}; the learner edition would show it")
        if inside is None and tagged:
            raise EditionError(f"{where}: cell {i} is tagged {SOLUTION_TAG!r} but lies outside every "
                               "solution-start/solution-end pair; the learner edition would lose it")
        if "solution-end" in names:
            if inside is None:
                raise EditionError(f"{where}: cell {i} ends a solution that never started")
            inside = None
    if inside is not None:
        raise EditionError(f"{where}: the solution started at cell {inside} has no solution-end marker")


def checker_called(source: str) -> str | None:
    """The last ``check_…(...)`` call (an exercise checker) at the top level of a stub cell."""
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
            if d.name != "exercise":
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

    translator = Translator(book, path.stem)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and SOLUTION_TAG not in _tags(cell):
            try:
                cell.source = translator.markdown(cell.source)
            except EditionError as e:
                raise EditionError(f"{where}, cell {i} (id {cell.get('id')}): {e}") from None
    nb, _ = TagRemovePreprocessor(remove_cell_tags={SOLUTION_TAG}).preprocess(nb, {})

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


AGENTS = """\
# For coding assistants working in this folder

This folder is the learner edition of *Causal Self-Attention, Step by Step*. The person you are helping is doing
its exercises to learn: each one asks them to write a step themselves, and a checker from the course library
(`attnlib.checks`) judges their answer and names the mistake it recognises.

- Do not write, complete or paste the solution of an exercise, and do not rewrite the learner's function into a
  working one. The course's own book holds the solutions; the learner chose this edition to work without them.
- Help at the level the checker has reached. Run, or ask them to run, the exercise's cell and read its verdict.
  The verdict answers at level 1 (a question or a failing property); `verdict.hint(2)` says where to look and
  `verdict.hint(3)` shows the smallest test case that differs. Explain the current level in your own words, point
  to the section of the chapter that teaches the idea, and ask a question that leads to the next step. Move up a
  level only when the learner asks, after they have tried.
- You may explain PyTorch, Python and the chapter's prose freely, run the learner's own code to show what it does,
  and point at the line a verdict names, as long as you do not supply the corrected code.
"""


def edition(root: Path = ROOT, words: dict | None = None) -> dict[str, str]:
    """``file name -> text`` of every file of the learner edition: its notebooks, and AGENTS.md, which asks the
    coding assistants that learners use to help at the checker's hint level instead of writing the solution.
    ``words``: a translation's EDITION_WORDS (tools/translations.py)."""
    book = Book(root, words)
    return {**{p.name: learner_notebook(p, book) for p in book.notebooks()}, "AGENTS.md": AGENTS}


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
            print(f"{shown}/ is stale; run `make learner` (python tools/editions.py):", file=sys.stderr)
            for name in names:
                print(f"  {shown}/{name}", file=sys.stderr)
            return 1
        print(f"{shown}/ is up to date ({len(files)} files)")
        return 0
    changed = write(out, files)
    for name in changed:
        print(f"{'wrote' if name in files else 'removed'} {shown}/{name}")
    print(f"{shown}/: {len(files)} files, {len(changed)} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
