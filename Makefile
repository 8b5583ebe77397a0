# One command each: `make book` renders the HTML, `make test` runs every test. Both set up .venv first,
# installing requirements.txt within the versions locked in constraints.txt.
PY    ?= python3
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK  := constraints.txt
UV    := uv==0.13.9

.PHONY: help setup book book-zh translations test test-fast lab notebooks learner colab-cell lock test-latest train-heads train-stack train-norms bench lint figures screenshots clean

help:  ## list the targets and what each does
	@grep -E '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## (.*)/  make \1\t\2/' | expand -t 24

$(STAMP): requirements.txt $(LOCK) pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements.txt -c $(LOCK)
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)  ## virtual environment, requirements.txt at the locked versions, the library installed editable

book: setup  ## render the book to HTML
	$(BIN)/jupyter-book build . -W -n --keep-going
	@echo "The book is at file://$(CURDIR)/_build/html/index.html"

# The Chinese book: its sources are the English pages with the translated prose of locale/zh_CN swapped in.
book-zh: setup  ## render the Chinese book to _build/zh/html (as strictly as `make book`)
	$(BIN)/python tools/translations.py sources _build/zh/src
	$(BIN)/jupyter-book build _build/zh/src -W -n --keep-going
	rm -rf _build/zh/html && mv _build/zh/src/_build/html _build/zh/html
	@echo "The Chinese book is at file://$(CURDIR)/_build/zh/html/index.html"

translations: setup  ## after an English change: update locale/zh_CN (changed messages marked fuzzy) and learner/zh/
	$(BIN)/python tools/translations.py update
	$(BIN)/python tools/translations.py learner

# The suite runs on a second kernel path (tests/conftest.py), so outputs that one processor prints fail here too.
# -n auto: one worker per core; --dist loadfile keeps each notebook's cells on one worker (nbval needs that).
# --durations=15 lists the slowest tests at the end, where the suite's time goes.
test: setup lint  ## ruff, library tests, nbval over every notebook (second kernel path), both editions, book build, browser
	$(BIN)/python -m pytest -n auto --dist loadfile --durations=15

# The inner loop: the library's tests and the notebooks' hygiene, with no notebook run, no book build, no browser.
# One process: starting xdist workers (each importing torch and collecting 1,800 tests) costs more than it saves.
FAST_SKIP := test_rendered_book.py test_learner_edition.py test_colab_path.py
test-fast: setup lint  ## library, checker and hygiene tests only (no notebook is run): about 30 s
	$(BIN)/python -m pytest -p no:xdist tests $(addprefix --ignore=tests/,$(FAST_SKIP))

lab: setup  ## open the learner edition in JupyterLab
	@echo "Opening the learner edition (learner/): exercises with stubs and checkers, no solutions."
	@echo "The full notebooks, with solutions, are in book/ (and in the rendered book)."
	$(BIN)/jupyter lab learner/

notebooks: setup  ## re-execute every notebook of book/ from a fresh kernel (outputs stored), then `make learner`
	for nb in book/*.ipynb; do \
	  $(BIN)/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.record_timing=False "$$nb" \
	  || exit 1; done
	@# a print that reached the kernel in pieces is stored as one output (no stray blank lines on the page)
	$(BIN)/jupyter nbconvert --to notebook --inplace --log-level=WARN --CoalesceStreamsPreprocessor.enabled=True book/*.ipynb
	$(BIN)/python tools/editions.py
	$(BIN)/python tools/translations.py learner

learner: setup  ## regenerate the learner edition (learner/ and learner/zh/) from the book's notebooks
	$(BIN)/python tools/editions.py
	$(BIN)/python tools/translations.py learner

colab-cell: setup  ## write the one Colab set-up cell template into every notebook of book/
	$(BIN)/python tools/colab_cell.py

lock:  ## regenerate the lock, constraints.txt, from requirements.txt and constraints.in (with uv)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(UV)"
	$(BIN)/python -m uv pip compile requirements.txt --constraint constraints.in --universal \
	  --python-version 3.10 --custom-compile-command "make lock" --quiet -o $(LOCK)

# For maintainers: the whole suite against the newest releases requirements.txt allows, on the interpreter PY
# (Colab's is 3.12: make test-latest PY=python3.12). The venv is made anew when PY is another Python.
LATEST := .venv-latest/bin/python
test-latest:  ## the whole suite against the newest releases that requirements.txt allows, on $(PY)
	@want=$$($(PY) -c 'import sys; print(sys.version)'); have=$$($(LATEST) -c 'import sys; print(sys.version)' 2>/dev/null); \
	  if [ "$$want" != "$$have" ]; then echo "making .venv-latest with $(PY)"; $(PY) -m venv --clear .venv-latest; fi
	$(LATEST) -m pip install -q --upgrade -r requirements.txt
	$(LATEST) -m pip install -q --no-deps -e .
	@$(LATEST) -c 'import sys, importlib.metadata as m; print("test-latest runs Python", sys.version.split()[0], "with", \
	  ", ".join(f"{p} {m.version(p)}" for p in ("torch", "numpy", "matplotlib", "transformers", "jupyter-book", "nbval")))'
	$(LATEST) -m pytest -n auto --dist loadfile

train-heads: setup  ## retrain the small models whose heads book/trained_heads reads (deterministic on one machine; writes attnlib/data)
	$(BIN)/python -m attnlib.induction

bench: setup  ## the performance benchmarks (quick version)
	$(BIN)/python benchmarks/run.py --quick

figures: setup  ## redraw the intro's pipeline figure from attnlib.plots.PIPELINE
	$(BIN)/python -c "from attnlib.plots import save_pipeline; save_pipeline()"

screenshots: setup  ## retake the screenshots shown on book/how_to_use.md (after the chapters change)
	UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest -p no:xdist tests/test_rendered_book.py -k screenshot

lint: setup  ## ruff over the library, the tests, the tools, the benchmarks and the book's extensions
	$(BIN)/ruff check lib tests benchmarks tools book/_ext

clean:  ## remove the built book (_build)
	rm -rf _build

train-stack: setup  ## retrain chapter 8's two character models, with and without the mask, and its table over seeds (deterministic; writes attnlib/data)
	$(BIN)/python -m attnlib.train

train-norms: setup  ## rerun chapter 7's eight-block runs, four variants over six seeds (about 4 min; writes attnlib/data/norm_runs.json)
	$(BIN)/python -m attnlib.norms
