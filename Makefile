PYTHON ?= python3

.PHONY: install test test-all params pretrain

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

# The main job: pretrain albert-mini on the built-in King James corpus (under 15 minutes on 2 cores).
pretrain: install
	albertlm pretrain
