# streams_app: the two commands are `make demo` and `make test`; everything else is optional.
# Both set up what they need (virtualenv, Kafka jars from Maven Central) once and reuse it after.

SHELL := /bin/bash
# The interpreter the virtualenv is built on (once; delete .venv to change it). PYTHON=... when
# given; else the distribution's own /usr/bin/python3 when it is 3.11 or newer and can make a
# virtualenv (distributions build CPython with profile-guided optimisation: a worker ran 3-20 %
# faster on it than on a default pyenv build, BENCHMARKS.md "The interpreter build");
# else python3 on PATH.
ifeq ($(origin PYTHON), undefined)
PYTHON := $(shell /usr/bin/python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && echo /usr/bin/python3 || echo python3)
endif
VENV ?= .venv
BIN := $(VENV)/bin
# The install stamp is keyed by pyproject.toml, so a dependency change reinstalls.
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-10)
PYTEST_ARGS ?=
BENCH_STAMP := $(VENV)/.bench-$(shell sha1sum pyproject.toml | cut -c1-10)

.PHONY: setup demo test test-long readme-figures faust-conformance chaos soak bench pipeline lint typecheck broker-start broker-stop clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "streams_app needs Python >= 3.11 (set PYTHON=python3.11)")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,spark,postgres,dev,compression]'
	@rm -f $(VENV)/.installed-*
	@touch $@

## setup: virtualenv + Kafka broker jars (both cached after the first run)
setup: $(STAMP)
	@$(BIN)/streams-app broker fetch

## demo: embedded broker, a worker on topologies.orders, data in, committed results out
demo: setup
	$(BIN)/streams-app demo

## test: the whole suite against real brokers (single node, 3-node cluster, Spark, PostgreSQL)
test: setup
	$(BIN)/python -m pytest -n 2 --lanes --test-summary=test-results.json $(PYTEST_ARGS)

## test-long: the cases marked `long`, left out of `make test`: further real-broker cases of
## capabilities `make test` covers (more kills, more records, other guarantees) and runs too long
## for its 20 minutes (docs/testing.md lists them)
test-long: setup
	$(BIN)/python -m pytest --long=only $(PYTEST_ARGS)

## readme-figures: README's `make test` figures from the last run's test-results.json
readme-figures: $(STAMP)
	$(BIN)/python -m tests.figures test-results.json --write README.md

## faust-conformance: every faust-streaming example (and guide app) under Faust and under streams_app
faust-conformance: setup
	STREAMS_APP_FAUST_CONFORMANCE=full $(BIN)/python -m pytest tests/faust_conformance $(PYTEST_ARGS)

## chaos: the long exactly-once fault suite (see `python -m streams_app.chaos --help` for options)
chaos: setup
	$(BIN)/python -m streams_app.chaos $(CHAOS_ARGS)

## soak: one worker for an hour under load, poison records and broker restarts (SOAK_ARGS="--duration 300")
soak: setup
	$(BIN)/python -m streams_app.chaos.soak $(SOAK_ARGS)

# The bench extra (quixstreams, for its comparison rows) is installed by `make bench` only.
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[bench]'
	@rm -f $(VENV)/.bench-*
	@touch $@

## bench: streams_app vs Kafka Streams, quixstreams and a bare aiokafka loop at steady state, per
## core and on the whole machine (BENCHMARKS.md; 4,000,000 records per core run, 8,000,000 per
## whole-machine run: about 2.5 hours on a quiet 2-core machine; BENCH_ARGS=--quick for a few
## minutes of development figures)
bench: setup $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

## pipeline: the Spark pipeline for the orders topology, locally
pipeline: setup
	$(BIN)/streams-app pipeline $(PIPELINE_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check streams_app topologies tests benchmarks
	$(BIN)/ruff format --check streams_app topologies tests benchmarks
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

broker-start: setup
	$(BIN)/streams-app broker start

broker-stop: $(STAMP)
	$(BIN)/streams-app broker stop

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
