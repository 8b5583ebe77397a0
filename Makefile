# One command each: `make book` renders the HTML, `make test` runs every test. Both set up .venv first.
PY    ?= python3
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup book test lab bench lint figures screenshots clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)  ## virtual environment, requirements.txt, the library installed editable

book: setup  ## render the book to HTML
	$(BIN)/jupyter-book build . -W -n --keep-going
	@echo "The book is at file://$(CURDIR)/_build/html/index.html"

test: setup  ## library tests, nbval over every notebook, the strict book build and the browser test
	$(BIN)/python -m pytest -n 2 --dist loadfile

lab: setup  ## open the chapters in JupyterLab
	$(BIN)/jupyter lab book/

bench: setup  ## the performance benchmarks (quick version)
	$(BIN)/python benchmarks/run.py --quick

figures: setup  ## redraw the intro's pipeline figure from attnlib.plots.PIPELINE
	$(BIN)/python -c "from attnlib.plots import save_pipeline; save_pipeline()"

screenshots: setup  ## retake the screenshots shown on book/how_to_use.md (after the chapters change)
	UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest -p no:xdist tests/test_rendered_book.py -k screenshot

lint: setup
	$(BIN)/ruff check lib tests benchmarks

clean:
	rm -rf _build
