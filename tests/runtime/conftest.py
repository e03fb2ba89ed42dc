"""Fixtures of the runtime tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streams_app.broker import TEST_SETTINGS, EmbeddedKafka, free_port


@pytest.fixture(scope="session")
def _own_broker_session() -> Iterator[EmbeddedKafka]:
    kafka = EmbeddedKafka(
        1, broker_port=free_port(), controller_port=free_port(), settings=TEST_SETTINGS
    ).start()
    try:
        yield kafka
    finally:
        kafka.discard()


@pytest.fixture
def own_broker(_own_broker_session: EmbeddedKafka) -> Iterator[EmbeddedKafka]:
    """A single broker of the outage tests' own, which they stop and start again on the same
    ports (the session broker must stay up for the other tests). One for all of them: a test
    gets it running, whatever the one before left."""
    _own_broker_session.ensure_all_running()
    yield _own_broker_session
    _own_broker_session.ensure_all_running()
