"""The Chinese edition, from the English source: catalogs beside the book, never a second copy of it.

    python tools/translations.py update          # after an English change: new messages, changed ones marked fuzzy
    python tools/translations.py check           # exit 1, naming page and message, unless every one is translated
    python tools/translations.py sources [DIR]   # the Chinese book's sources (default _build/zh/src)
    python tools/translations.py learner [--check]   # learner/zh/, the Chinese learner edition
    python tools/translations.py todo PAGE > F.json   # PAGE's messages to translate, {English: current or ""}
    python tools/translations.py apply PAGE F.json    # write the translations of F.json into PAGE's catalog

The English pages stay the only source of code, outputs and exercises. A *message* is one markdown cell of a
notebook, one figure's alt text (a code cell's ``mystnb.image.alt``), one block of a Markdown page (the text between
blank lines outside fences, or one row of a table), one caption of ``_toc.yml``, the book's title, or a word the
learner edition writes. Each page has a gettext catalog, ``locale/zh_CN/LC_MESSAGES/<page>.po`` (``_book.po`` for
the book's own words), read and written with polib.
A message that changes in English keeps its old translation marked fuzzy, with the old English beside it
(``#| msgid``), until someone updates it; ``check`` (and the test suite) fails on it.

A translation keeps what is not prose exactly as the English has it: inline code, math, link targets, the
targets of roles (``{doc}``, ``{ref}``, ``{numref}``, ``{cite}``), labels, and the lines of directives.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import re
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import nbformat
import polib
import yaml
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
LANG = "zh_CN"
CATALOGS = Path("locale") / LANG / "LC_MESSAGES"   # under the repository's root
SOURCES = ROOT / "_build" / "zh" / "src"
LEARNER_ZH = Path("learner") / "zh"
BOOK_CATALOG = "_book"   # the book's title and the captions of _toc.yml
FIGURES_CATALOG = "_figures"   # the interactive figures' words and titles

FENCE = re.compile(r"^\s*(```+|:::+)")
# What a translation must keep byte for byte (each a regex whose matches are compared as multisets).
KEPT = {
    "inline code": re.compile(r"(?<![`}])`[^`\n]+`(?!`)"),
    "math": re.compile(r"\$\$.+?\$\$|\$[^$\n]+\$", re.S),
    "link target": re.compile(r"\]\(([^)\s]+)\)"),
    "role target": re.compile(r"\{(\w+)\}`(?:[^`<]*<)?([^`>]+)>?`"),
    "label": re.compile(r"^\([\w-]+\)=", re.M),
    "directive line": re.compile(r"^\s*(?:```+|:::+)\s*\{[\w-]+\}|^:(?!alt:)[\w-]+:.*$", re.M),   # alt text is prose
    "placeholder": re.compile(r"\{\w+\}(?!`)"),    # a figure's words: {T}, {head} … filled in by its code
}
PROSE = re.compile(r"[A-Za-z]{2}")


def kept(what: str, text: str) -> list:
    """The matches of KEPT[what] in ``text``; inline code is looked for outside roles, whose backticks it shares."""
    if what == "inline code":
        text = KEPT["role target"].sub(" ", text)
    return KEPT[what].findall(text)


@dataclass(frozen=True)
class Message:
    page: str      # the page's stem, or BOOK_CATALOG
    key: str       # where it stands: "cell <id>", "cell <id> alt", "unit <n>", "caption <n>", "title"
    text: str      # the English


# --- the English messages -------------------------------------------------------------------------------------


def pages(root: Path = ROOT) -> list[Path]:
    """The book's pages in the order of _toc.yml (as the learner edition reads it)."""
    book = root / "book"
    return [next(p for p in (book / f"{stem}.ipynb", book / f"{stem}.md") if p.is_file())
            for stem in editions().Book(root).toc]


def translatable(text: str) -> bool:
    """Whether ``text`` holds prose: letters outside code, math, labels and directive lines."""
    for what in ("role target", *KEPT):
        text = KEPT[what].sub(" ", text)
    return bool(PROSE.search("\n".join(line for line in text.splitlines() if not FENCE.match(line))))


def blocks(text: str) -> list[str]:
    """A Markdown page cut at blank lines that lie outside fences (a fenced directive stays one block)."""
    out, current, fence = [], [], None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if m and fence is None:
            fence = m.group(1)
        elif m and line.strip() == fence:
            fence = None
        if not line.strip() and fence is None:
            if current:
                out.append("\n".join(current))
            current = []
        else:
            current.append(line)
    if current:
        out.append("\n".join(current))
    return out


def units(text: str) -> list[tuple[str, str]]:
    """A Markdown page as (unit, what follows it) pairs: a block, or one row of a table (its rule row included,
    which holds no prose and stays as it is). Joining every unit and its follower gives the page back."""
    out = []
    for block in blocks(text):
        lines = block.split("\n")
        if all(line.lstrip().startswith("|") for line in lines):
            out += [(line, "\n") for line in lines]
        else:
            out.append((block, "\n"))
        out[-1] = (out[-1][0], "\n\n")
    return out


def messages(path: Path) -> list[Message]:
    """The messages of one page, in page order."""
    page = path.stem
    if path.suffix == ".md":
        return [Message(page, f"unit {i}", u) for i, (u, _) in enumerate(units(path.read_text(encoding="utf-8")))
                if translatable(u)]
    out = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown" and translatable(cell.source):
            out.append(Message(page, f"cell {cell.id}", cell.source))
        alt = cell.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt")
        if alt:
            out.append(Message(page, f"cell {cell.id} alt", alt))
    return out


def book_messages(root: Path = ROOT) -> list[Message]:
    """The book's title, the captions of _toc.yml, and the words the learner edition writes itself."""
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    return [Message(BOOK_CATALOG, "title", config["title"])] + [
        Message(BOOK_CATALOG, f"caption {i}", part["caption"]) for i, part in enumerate(toc["parts"])] + [
        Message(BOOK_CATALOG, f"learner edition {k}", editions().EDITION_WORDS[k]) for k in ("exercise", "time_rule")]


def stored_figures(path: Path):
    """(cell id, HTML) of every interactive figure stored in a notebook's outputs."""
    from attnlib.explore import is_figure

    for cell in nbformat.read(path, as_version=4).cells:
        for out in cell.get("outputs", []):
            html = out.get("data", {}).get("text/html", "")
            if is_figure(html):
                yield cell.id, html


def figure_messages(root: Path = ROOT) -> list[Message]:
    """The figures' words (attnlib.explore and attnlib.live), then each stored figure's title and layer word."""
    from attnlib.explore import DATA, PAGE_WORDS, WORDS
    from attnlib.live import LIVE_PAGE_WORDS, LIVE_WORDS

    out = [Message(FIGURES_CATALOG, f"{where} {k}", v) for where, words in
           (("WORDS", WORDS), ("LIVE_WORDS", LIVE_WORDS), ("PAGE_WORDS", PAGE_WORDS),
            ("LIVE_PAGE_WORDS", LIVE_PAGE_WORDS)) for k, v in words.items()]
    for path in pages(root):
        if path.suffix == ".ipynb":
            for cell_id, html in stored_figures(path):
                data = json.loads(DATA.search(html).group(1))
                out += [Message(FIGURES_CATALOG, f"{path.stem} cell {cell_id} {k}", data[k])
                        for k in ("title", "layerLabel") if data.get(k)]
    return out


def all_messages(root: Path = ROOT) -> dict[str, list[Message]]:
    return {BOOK_CATALOG: book_messages(root), FIGURES_CATALOG: figure_messages(root),
            **{p.stem: messages(p) for p in pages(root)}}


# --- the catalogs ---------------------------------------------------------------------------------------------


def catalog_path(page: str, root: Path = ROOT) -> Path:
    return root / CATALOGS / f"{page}.po"


def read(page: str, root: Path = ROOT) -> polib.POFile | None:
    path = catalog_path(page, root)
    return polib.pofile(str(path), wrapwidth=0) if path.is_file() else None


def similar(old: str, new: str) -> bool:
    """Whether ``new`` reads as an edit of ``old`` (a message that stands where another stood may be a new one)."""
    return difflib.SequenceMatcher(None, old, new, autojunk=False).ratio() >= 0.5


def locked(root: Path) -> FileLock:
    """One writer of the catalogs at a time (``update`` rewrites them all, ``apply`` one)."""
    (root / CATALOGS).mkdir(parents=True, exist_ok=True)
    return FileLock(str(root / CATALOGS / ".lock"))


def update(root: Path = ROOT) -> list[str]:
    """Bring every catalog up to the English: returns one line per page that changed."""
    with locked(root):
        return _update(root)


def _update(root: Path) -> list[str]:
    report = []
    every = all_messages(root)
    for page, msgs in every.items():
        old = read(page, root)
        by_id = {e.msgid: e for e in old} if old else {}
        by_key = {e.comment: e for e in by_id.values()}
        new = polib.POFile(wrapwidth=0)
        new.metadata = {"Project-Id-Version": f"Causal Self-Attention, Step by Step: {page}", "Language": LANG,
                        "MIME-Version": "1.0", "Content-Type": "text/plain; charset=UTF-8",
                        "Content-Transfer-Encoding": "8bit"}
        counts = Counter()
        for msg in msgs:
            if new.find(msg.text) is not None:
                continue                                   # the same text twice on a page: one translation
            same, was = by_id.get(msg.text), by_key.get(msg.key)
            if same is not None and same.msgstr:
                entry = polib.POEntry(msgid=msg.text, msgstr=same.msgstr, comment=msg.key, flags=list(same.flags),
                                      previous_msgid=same.previous_msgid)
                counts["kept"] += 1
            elif was is not None and was.msgstr and similar(was.msgid, msg.text):
                entry = polib.POEntry(msgid=msg.text, msgstr=was.msgstr, comment=msg.key, flags=["fuzzy"],
                                      previous_msgid=was.previous_msgid or was.msgid)
                counts["fuzzy"] += 1
            else:
                entry = polib.POEntry(msgid=msg.text, msgstr="", comment=msg.key)
                counts["new"] += 1
            new.append(entry)
        path = catalog_path(page, root)
        text = str(new) + "\n"
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            report.append(f"{path.relative_to(root)}: {counts['kept']} kept, {counts['fuzzy']} changed "
                          f"(marked fuzzy), {counts['new']} new")
    for path in sorted((root / CATALOGS).glob("*.po")):
        if path.stem not in every:
            path.unlink()
            report.append(f"{path.relative_to(root)}: removed (no such page)")
    return report


CJK = r"\u3000-\u303f\u3400-\u9fff\uff00-\uffef"
SOFT_BREAK = re.compile(rf"(?<=[{CJK}])\n(?=[{CJK}])")
BLOCK_LINE = re.compile(r"^\s*([-*+>|#:]|\d+\.\s|```|\$\$|\(\S+\)=)")


def joined_lines(text: str) -> str:
    """Chinese prose with its soft line breaks removed where both sides are Chinese: a browser shows such a
    break as a space between two characters. Lines that start a list item, a table row, a heading, a fence or
    display math are left alone."""
    lines = text.split("\n")
    out = lines[:1]
    for line in lines[1:]:
        prev = out[-1]
        prose = prev.strip() and line.strip() and not BLOCK_LINE.match(line)
        if prose and not prev.lstrip().startswith(("```", "$$")) and SOFT_BREAK.search(prev[-1:] + "\n" + line[:1]):
            out[-1] = prev + line
        else:
            out.append(line)
    return "\n".join(out)


def broken_markup(english: str, chinese: str) -> list[str]:
    """What the translation changed of what it must keep, one line each ([] when nothing)."""
    out = []
    for what in KEPT:
        want, got = Counter(kept(what, english)), Counter(kept(what, chinese))
        if want != got:
            lost, added = want - got, got - want
            out.append(f"{what}: " + "; ".join(
                [f"missing {x!r}" for x in lost] + [f"not in the English {x!r}" for x in added]))
    return out


def problems(root: Path = ROOT) -> list[str]:
    """Every message that has no current translation, or whose translation broke the markup."""
    out = []
    for page, msgs in all_messages(root).items():
        catalog = read(page, root)
        if catalog is None:
            out.append(f"{page}: no catalog {catalog_path(page, root).relative_to(root)}; run `make translations`")
            continue
        for msg in msgs:
            entry = catalog.find(msg.text)
            first = msg.text.strip().splitlines()[0][:70]
            if entry is None or not entry.msgstr:
                out.append(f"{page}, {msg.key}: not translated: {first!r}")
            elif entry.fuzzy:
                out.append(f"{page}, {msg.key}: the English changed since it was translated: {first!r}")
            else:
                out += [f"{page}, {msg.key}: {p}" for p in broken_markup(msg.text, entry.msgstr)]
    return out


def todo(page: str, root: Path = ROOT) -> dict[str, str]:
    """The messages of ``page`` that need a translator: untranslated, or fuzzy (with the old translation)."""
    catalog = read(page, root)
    return {e.msgid: e.msgstr for e in catalog if not e.msgstr or e.fuzzy} if catalog else {}


def apply(page: str, translated: dict[str, str], root: Path = ROOT) -> list[str]:
    """Write ``translated`` (English -> Chinese) into ``page``'s catalog, clearing fuzzy; refuses broken markup."""
    with locked(root):
        return _apply(page, translated, root)


def _apply(page: str, translated: dict[str, str], root: Path) -> list[str]:
    catalog = read(page, root)
    refused = []
    for english, chinese in translated.items():
        entry = catalog.find(english) if catalog else None
        if entry is None:
            refused.append(f"not a message of {page}: {english[:60]!r}")
        elif chinese and (broken := broken_markup(english, chinese)):
            refused.append(f"{english[:60]!r}: " + "; ".join(broken))
        elif chinese:
            entry.msgstr, entry.previous_msgid = joined_lines(chinese), None
            entry.flags = [f for f in entry.flags if f != "fuzzy"]
    if catalog is not None:
        catalog_path(page, root).write_text(str(catalog) + "\n", encoding="utf-8")
    return refused


# --- the Chinese sources --------------------------------------------------------------------------------------


def translation(page: str, root: Path = ROOT):
    """English message -> Chinese, for the current translations of ``page`` (untranslated messages stay English)."""
    path = catalog_path(page, root)
    table = _table(path, path.stat().st_mtime_ns if path.is_file() else None)
    return lambda text: table.get(text, text)


@functools.lru_cache(maxsize=64)
def _table(path: Path, mtime: int | None) -> dict[str, str]:
    """A catalog's current translations (read again whenever the file changes)."""
    catalog = polib.pofile(str(path), wrapwidth=0) if mtime is not None else []
    return {e.msgid: e.msgstr for e in catalog if e.msgstr and not e.fuzzy}


def translated_notebook(path: Path, root: Path = ROOT) -> nbformat.NotebookNode:
    """The notebook with its prose, alt text and figures' words translated; code and every other output kept."""
    import attnlib.live  # noqa: F401  (registers the live figure with redrawn)
    from attnlib.explore import is_figure, redrawn

    nb = nbformat.read(path, as_version=4)
    tr, tr_figure = translation(path.stem, root), translation(FIGURES_CATALOG, root)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = tr(cell.source)
        for out in cell.get("outputs", []):
            if is_figure(out.get("data", {}).get("text/html", "")):
                out.data["text/html"] = redrawn(out.data["text/html"], tr_figure)
        image = cell.get("metadata", {}).get("mystnb", {}).get("image", {})
        if image.get("alt"):
            image["alt"] = tr(image["alt"])
    return nb


def translated_markdown(path: Path, root: Path = ROOT) -> str:
    tr = translation(path.stem, root)
    return "".join(tr(u) + after for u, after in units(path.read_text(encoding="utf-8")))[:-1]


def write_sources(out: Path = SOURCES, root: Path = ROOT) -> Path:
    """The Chinese book's sources: translated pages and the configuration of a Chinese build, in ``out``."""
    if out.exists():
        shutil.rmtree(out)
    (out / "book").mkdir(parents=True)
    for item in ("_ext", "_static", "_templates", "images", "references.bib"):
        src = root / "book" / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, out / "book" / item)
    for path in pages(root):
        if path.suffix == ".ipynb":
            nbformat.write(translated_notebook(path, root), out / "book" / path.name)
        else:
            (out / "book" / path.name).write_text(translated_markdown(path, root), encoding="utf-8")
    tr = translation(BOOK_CATALOG, root)
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    for part in toc["parts"]:
        part["caption"] = tr(part["caption"])
    (out / "_toc.yml").write_text(yaml.safe_dump(toc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    config["title"] = tr(config["title"])
    config["exclude_patterns"] = [p for p in config["exclude_patterns"] if p != "learner"] + ["learner/*.ipynb"]
    sphinx = config["sphinx"]["config"]
    sphinx["language"] = LANG
    sphinx["other_language"] = {"label": "English", "lang": "en", "prefix": "../"}
    sphinx["learner_dir"] = "learner/zh"
    (out / "_config.yml").write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False),
                                     encoding="utf-8")
    # the launch buttons' check that a learner notebook exists reads learner/zh/ beside the sources
    (out / "learner" / "zh").mkdir(parents=True)
    for nb in (root / LEARNER_ZH).glob("*.ipynb"):
        shutil.copy(nb, out / "learner" / "zh" / nb.name)
    return out


# --- the Chinese learner edition ------------------------------------------------------------------------------


def editions():
    """tools/editions.py, which generates the learner edition."""
    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    import editions as module
    return module


def learner_files(root: Path = ROOT) -> dict[str, str]:
    """learner/zh/: the learner edition, generated by tools/editions.py from the Chinese sources."""
    tr = translation(BOOK_CATALOG, root)
    words = {k: tr(v) for k, v in editions().EDITION_WORDS.items()} | {"book_path": "../../book/"}
    return editions().edition(write_sources(root / "_build" / "zh" / "learner-src", root), words)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["update", "check", "sources", "learner", "todo", "apply"])
    parser.add_argument("args", nargs="*", help="sources: the folder; todo: a page; apply: a page and a JSON file")
    parser.add_argument("--check", action="store_true", help="with learner: exit 1 when learner/zh/ is stale")
    args = parser.parse_args(argv)
    if args.command == "update":
        report = update()
        print("\n".join(report) if report else "the catalogs are current")
        wrong = problems()
        print(f"{len(wrong)} messages to translate or review (python tools/translations.py check lists them)")
        return 0
    if args.command == "check":
        wrong = problems()
        for line in wrong:
            print(line, file=sys.stderr)
        print(f"{len(wrong)} problems" if wrong else "every message is translated and current")
        return 1 if wrong else 0
    if args.command == "sources":
        print(f"wrote {write_sources(Path(args.args[0]) if args.args else SOURCES)}")
        return 0
    if args.command == "todo":
        print(json.dumps(todo(args.args[0]), ensure_ascii=False, indent=1))
        return 0
    if args.command == "apply":
        refused = apply(args.args[0], json.loads(Path(args.args[1]).read_text(encoding="utf-8")))
        for line in refused:
            print(f"refused: {line}", file=sys.stderr)
        return 1 if refused else 0
    files = learner_files()
    if args.check:
        names = editions().stale(ROOT / LEARNER_ZH, files)
        for name in names:
            print(f"learner/zh/{name} is stale; run `make translations`", file=sys.stderr)
        return 1 if names else 0
    changed = editions().write(ROOT / LEARNER_ZH, files)
    print(f"learner/zh/: {len(files)} files, {len(changed)} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
