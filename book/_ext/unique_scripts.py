"""Drop repeated inline <script> blocks from every page.

sphinx-thebe registers its inline configuration script once per page build under Sphinx 7.4, so each page
carried it twice and the browser reported "Identifier 'THEBE_JS_URL' has already been declared".
"""


def _unique(app, pagename, templatename, context, doctree):
    seen, kept = set(), []
    for script in context.get("script_files", []):
        # an inline script shows up once with filename None and once with "": both mean "no file"
        key = (getattr(script, "filename", script) or None, tuple(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            kept.append(script)
    context["script_files"] = kept


def setup(app):
    app.connect("html-page-context", _unique)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
