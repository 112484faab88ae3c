# The two entry points are `make demo` and `make test`; everything else is a step they depend on.
# Every step is idempotent and cached: a second run on a warm machine rebuilds nothing.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Control-plane binaries the test harness runs (built from the Go module proxy, cached by version).
CONTROL_PLANE := etcd kube-apiserver kube-controller-manager kwok

.PHONY: all venv toolchain unit scenarios test demo clean help

help:
	@echo "make test   install what is needed, run unit tests then every Gherkin scenario"
	@echo "make demo   install what is needed and run the take-home end to end"

all: test

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@

venv: $(STAMP)

toolchain:
	$(PYTHON) hack/toolchain.py build $(CONTROL_PLANE)

unit: venv
	$(BIN)/python -m pytest tests

scenarios: venv toolchain
	$(BIN)/python -m pytest features

test: unit scenarios

demo: venv toolchain
	$(BIN)/python -m pytest features -m takehome -v

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
