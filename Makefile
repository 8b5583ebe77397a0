# One command each: `make book` renders the HTML, `make test` runs every test. Both set up .venv first,
# installing requirements.txt within the versions locked in constraints.txt.
PY    ?= python3
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK  := constraints.txt
UV    := uv==0.13.9

.PHONY: setup book test lab notebooks learner colab-cell lock test-latest train-heads bench lint figures screenshots clean

$(STAMP): requirements.txt $(LOCK) pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements.txt -c $(LOCK)
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)  ## virtual environment, requirements.txt at the locked versions, the library installed editable

book: setup  ## render the book to HTML
	$(BIN)/jupyter-book build . -W -n --keep-going
	@echo "The book is at file://$(CURDIR)/_build/html/index.html"

test: setup  ## library tests, nbval over every notebook, both editions, the strict book build and the browser test
	$(BIN)/python -m pytest -n 2 --dist loadfile

lab: setup  ## open the learner edition in JupyterLab
	@echo "Opening the learner edition (learner/): exercises with stubs and checkers, no solutions."
	@echo "The full notebooks, with solutions, are in book/ (and in the rendered book)."
	$(BIN)/jupyter lab learner/

notebooks: setup  ## re-execute every notebook of book/ from a fresh kernel (outputs stored), then `make learner`
	for nb in book/*.ipynb; do \
	  $(BIN)/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.record_timing=False "$$nb" \
	  || exit 1; done
	$(BIN)/python book/_ext/editions.py

learner: setup  ## regenerate the learner edition (learner/) from the book's notebooks
	$(BIN)/python book/_ext/editions.py

colab-cell: setup  ## write the one Colab set-up cell template into every notebook of book/
	$(BIN)/python book/_ext/colab_cell.py

lock:  ## regenerate the lock, constraints.txt, from requirements.txt and constraints.in (with uv)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(UV)"
	$(BIN)/python -m uv pip compile requirements.txt --constraint constraints.in --universal \
	  --python-version 3.10 --custom-compile-command "make lock" --quiet -o $(LOCK)

test-latest:  ## for maintainers: the whole suite against the newest releases requirements.txt allows
	test -x .venv-latest/bin/python || $(PY) -m venv .venv-latest
	.venv-latest/bin/python -m pip install -q --upgrade -r requirements.txt
	.venv-latest/bin/python -m pip install -q --no-deps -e .
	.venv-latest/bin/python -m pytest -n 2 --dist loadfile

train-heads: setup  ## retrain the small models whose heads chapter 6 reads (deterministic; writes attnlib/data)
	$(BIN)/python -m attnlib.induction

bench: setup  ## the performance benchmarks (quick version)
	$(BIN)/python benchmarks/run.py --quick

figures: setup  ## redraw the intro's pipeline figure from attnlib.plots.PIPELINE
	$(BIN)/python -c "from attnlib.plots import save_pipeline; save_pipeline()"

screenshots: setup  ## retake the screenshots shown on book/how_to_use.md (after the chapters change)
	UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest -p no:xdist tests/test_rendered_book.py -k screenshot

lint: setup
	$(BIN)/ruff check lib tests benchmarks book/_ext

clean:
	rm -rf _build
