# Two commands on a fresh machine (Python 3.11, Java 17, package registries):
#   make demo   - set up .venv with what the demo needs ([spark,arrow]) and run the default job end to end
#   make test   - set up .venv with everything, run make lint (ruff, mypy, the import-layer contracts),
#                 make docs (the strict documentation build), then the test suite (which opens every
#                 page of the site in headless Chromium: make browser installs it from Debian)
#   make install-matrix - clean venvs built the way users install (the README's lines, the wheel,
#                 each extra); CI runs it after make test (.ci/run)
# Longer runs are separate: make torture, make torture-matrix, make explore, make bench.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
EXTRAS := all,test,bench,docs
DEMO_STAMP  := $(VENV)/.installed-demo
DEMO_EXTRAS := spark,arrow

.PHONY: demo test test-long test-fast install-matrix torture torture-matrix explore bench lint docs docs-serve browser postgres prometheus venv demo-venv check-java clean emulators

$(STAMP): setup.cfg setup.py constraints.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[$(EXTRAS)]'
	@touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): setup.cfg setup.py constraints.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[$(DEMO_EXTRAS)]'
	@touch $(DEMO_STAMP)

venv: $(STAMP)

demo-venv: $(DEMO_STAMP)

check-java:
	@command -v java >/dev/null 2>&1 || { echo "error: 'java' is not on PATH; Spark needs Java 17 or newer (Debian/Ubuntu: apt-get install openjdk-17-jre-headless)" >&2; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  if [ -n "$$v" ] && [ "$$v" -lt 17 ]; then echo "error: Java $$v found, Spark 4 needs Java 17 or newer" >&2; exit 1; fi

demo: check-java demo-venv
	rm -rf .work/quickstart
	$(BIN)/seo run landing_to_parquet

# Azurite (npm) for the Azure storage tests, pinned in tests/emulators/package-lock.json;
# skipped with a message where node/npm are missing (the tests then skip too).
emulators: venv
	$(BIN)/python -m tests.emulators.servers

# ruff (style, imports, bugbear, pyupgrade; the formatting) over all the code; mypy --strict over the library
# (config in pyproject.toml and setup.cfg); the import-layer contracts.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The documentation site, built strictly (a broken link or a docstring warning fails it) into .work/site.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The site with its search, at http://127.0.0.1:8000/ (rebuilt when a page changes); opened as a
# file, .work/site has no search (browsers do not let a page read its index from disk) and says so.
docs-serve: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

# Chromium for the site's browser test, from Debian (as root); elsewhere that test skips and says so.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "warning: could not install chromium; the browser test of the docs will skip" >&2; \
	  else echo "warning: chromium is not installed (Debian: apt-get install chromium); the browser test of the docs will skip" >&2; fi; }

# PostgreSQL for the Iceberg SQL-catalog tests (a real server, started by their fixture), from
# Debian (as root); elsewhere those tests skip and say so.
postgres:
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
	      || echo "warning: could not install postgresql; the Iceberg PostgreSQL-catalog tests will skip" >&2; \
	  else echo "warning: PostgreSQL is not installed (Debian: apt-get install postgresql); its tests will skip" >&2; fi; }

# Prometheus and promtool for the observability tests (a real server scrapes a stream; promtool checks and
# unit-tests the alert rules), from Debian (as root); elsewhere those tests skip and say so.
prometheus:
	@command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null) \
	      || echo "warning: could not install prometheus; the observability tests that need it will skip" >&2; \
	  else echo "warning: Prometheus is not installed (Debian: apt-get install prometheus); the observability tests that need it will skip" >&2; fi; }

# two pytest workers (pytest-xdist), one test file each at a time: a module's fixtures (the torture
# matrix's run) stay in one worker; each worker has its own SparkSession and emulators
test: check-java venv emulators lint docs browser postgres prometheus
	$(BIN)/python -m pytest -q -m "not long and not install" -n 2 --dist loadfile --durations=25

# the long runs kept out of `make test` (Spark Connect tortures, zombies at every boundary, ...)
test-long: check-java venv emulators
	$(BIN)/python -m pytest -q -m long

# clean venvs from this checkout's files: make demo on a fresh copy, the README's install lines (the
# source and the built wheel) with the quickstart, and each extra on top (tests/install; CI runs it
# after make test: ~4 minutes of venv builds that a change outside packaging rarely needs)
install-matrix: check-java venv
	$(BIN)/python -m pytest -q -m install -n 2 --dist loadfile

test-fast: venv
	$(BIN)/python -m pytest -q -m "not spark and not torture"

torture: check-java venv
	$(BIN)/python -m tests.torture.run $(ARGS)

# every supported table configuration, kill -9 at every commit boundary, zombies, refused
# restarts and seo recover/gc/verify between kills, at the commit layer (no Spark)
torture-matrix: venv
	$(BIN)/python -m tests.torture.matrix $(ARGS)

# the scenario explorer's long run: random programs of user actions against real Spark and every
# reader, checked after every step (results in benchmarks/results/explore-*.json; ARGS="--programs 2000 --jobs 2 --guided")
explore: check-java venv
	$(BIN)/python -m tests.explorer.run $(ARGS)

bench: check-java venv
	$(BIN)/python -m benchmarks $(ARGS)

clean:
	rm -rf $(VENV) .work build *.egg-info
