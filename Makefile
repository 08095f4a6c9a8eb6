PYTHON ?= python3

.PHONY: install test test-all params

install:
	$(PYTHON) -m pip install -q -r requirements-dev.txt
	$(PYTHON) -m pip install -q -e '.[dev]'

# The README's test command: installs everything, then runs the default (non-slow) test suite.
test: install
	$(PYTHON) -m pytest -q

# Everything, slow and multi-process tests included.
test-all: install
	$(PYTHON) -m pytest -q -m ''

params: install
	albertlm params
