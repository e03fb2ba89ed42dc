"""The Faust conformance suite's set-up: faust-streaming's examples, fetched once."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from streams_app.testing.faust_sdist import faust_examples as fetch_examples

GUIDE = Path(__file__).parent / "guide"

logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


@pytest.fixture(scope="session")
def faust_examples() -> Path:
    """faust-streaming 0.15.3's ``examples/`` (its sdist from PyPI, cached, never built)."""
    return fetch_examples()
