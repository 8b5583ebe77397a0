"""A link at the top of every page to the same page in the book's other language.

The English book is published at the site's root and the Chinese one under ``zh/`` (tools/translations.py writes
its sources). ``other_language`` in the Sphinx config says where the other edition lies from this one's root:
``{"label": "中文", "lang": "zh-CN", "prefix": "zh/"}`` here, ``{"label": "English", "lang": "en", "prefix": "../"}``
in the Chinese build. Without it the extension adds nothing.
"""

from __future__ import annotations

from html import escape


def add_language_link(app, pagename, templatename, context, doctree):
    other = app.config.other_language
    if not other or "body" not in context:
        return
    href = "../" * pagename.count("/") + other["prefix"] + pagename + ".html"
    link = (f'<p class="other-language"><a href="{escape(href)}" hreflang="{escape(other["lang"])}" '
            f'lang="{escape(other["lang"])}">{escape(other["label"])}</a></p>')
    context["body"] = link + context["body"]


def setup(app):
    app.add_config_value("other_language", None, "html")
    app.connect("html-page-context", add_language_link)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
