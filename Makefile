# Everything a fresh machine needs is reached from two targets:
#   make hello   set up, then run the `hello` example flow in a container
#   make test    set up, then lint, type-check and run the whole test suite
# Each set-up step is idempotent and skipped when nothing it depends on changed.

PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: setup venv bytecode engine compose images image test lint typecheck pytest hello engine-stop clean

setup: venv bytecode engine compose images

venv: $(STAMP)

# editable_mode=compat: a plain path in a .pth file; setuptools' default editable finder is
# imported by `site` at every start of the interpreter (~20 ms of every command). pip >= 25.1
# writes console scripts that do not import re (pip#13166): ~5 ms of every warm command.
# -qq: setuptools' notices (compat mode is transitional) are not the user's to act on.
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check 'pip>=25.1'
	$(BIN)/pip install -qq --disable-pip-version-check -e '.[dev]' \
	  --config-settings editable_mode=compat
	touch $(STAMP)

# The checkout's bytecode, written ahead: an editable install imports runner/ from here, and
# where PYTHONDONTWRITEBYTECODE is set (these machines) every command would compile every
# module it imports again (~60 ms of each `flow-runner exec`). -f: compileall judges a file
# current by its mtime alone, the import system by its size too (an edit within a second).
bytecode: venv
	$(BIN)/python -m compileall -q -f runner

# The engine this set-up starts also gets gVisor (runsc), so `policy verify strict` and
# the strict profile's tests run for real; an engine started elsewhere is left alone.
engine:
	./images/engine.sh start
	if [ -f /run/flow-runner-dockerd.pid ]; then ./images/engine.sh runsc; fi

# Debian's docker-compose (1.29): pytest-docker drives the runner-image tests with it.
compose:
	command -v docker-compose >/dev/null || { export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends docker-compose >/dev/null; }

# Every image, the runner image included (its wheels are downloaded by this venv's pip).
images: venv engine
	PYTHON=$(abspath $(BIN)/python) ./images/build.sh

# The runner image alone: flow-runner:VERSION and flow-runner:latest.
image: venv engine
	PYTHON=$(abspath $(BIN)/python) ./images/build.sh runner

lint: venv
	$(BIN)/ruff check runner tests bench images examples
	$(BIN)/ruff format --check runner tests bench images examples

typecheck: venv
	$(BIN)/mypy --strict runner/

pytest: setup
	$(BIN)/pytest -q

test: lint typecheck pytest

hello: setup
	$(BIN)/flow-runner exec flow-runner/examples-hello:latest --input @examples/hello/input.json

engine-stop:
	./images/engine.sh stop

clean:
	rm -rf $(VENV) .build
