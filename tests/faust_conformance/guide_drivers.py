"""Our own apps written after faust-streaming's user guide, and their drivers."""

from __future__ import annotations

from tests.faust_conformance.drivers import Example

GUIDE_APPS: list[Example] = []
