"""faust-streaming's own examples (and our apps after its user guide), under faust-streaming
and under streams_app with only the imports changed, against the same real broker: the
observations must be equal, but for an example that observes a documented difference: then
exactly that difference (``Example.difference``) and nothing else.

``make test`` runs the quick ones; ``make faust-conformance`` (``STREAMS_APP_FAUST_CONFORMANCE=
full``) runs every example that needs neither the network, Redis, Django nor FastAPI.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.faust_conformance.context import Context, create_topics, isolated
from tests.faust_conformance.drivers import EXAMPLES, Example
from tests.faust_conformance.guide_drivers import GUIDE_APPS
from tests.faust_conformance.runner import STREAMS_APP, SYSTEMS

FULL = os.environ.get("STREAMS_APP_FAUST_CONFORMANCE") == "full"
GUIDE = Path(__file__).parent / "guide"

RUNNABLE = [e for e in EXAMPLES + GUIDE_APPS if e.run is not None and not e.excluded]
SELECTED = [e for e in RUNNABLE if FULL or e.quick]

pytestmark = [pytest.mark.kafka, pytest.mark.faust_conformance]


#: In make test-long (``long``), left out of make test: make test keeps ``word_count`` and
#: ``guide_models`` (agents, tables, a timer and models under both systems); ``hello_world`` adds
#: one agent that prints. ``make faust-conformance`` runs every example, these included.
LONG = {"hello_world"}
PARAMS = [
    pytest.param(e, id=e.name, marks=[pytest.mark.long] if e.name in LONG and not FULL else [])
    for e in SELECTED
]


@pytest.mark.parametrize("example", PARAMS)
async def test_same_observations_under_faust_and_streams_app(
    example: Example, faust_examples: Path, bootstrap_servers: str, tmp_path: Path
) -> None:
    source = (GUIDE if example.guide else faust_examples) / example.path
    assert example.run is not None
    observed = {}
    if example.faust_broken is not None:
        # faust-streaming 0.15.3 cannot run this example; say so, and hold streams_app to the
        # example's intent instead.
        async with isolated(bootstrap_servers):
            ctx = Context("faust", source, tmp_path / "faust", bootstrap_servers)
            ctx.start()
            assert ctx.app.process is not None
            ctx.app.process.wait(60)
            assert example.faust_broken in ctx.app.output()
        observed["faust"] = example.expected
    for system in SYSTEMS if example.faust_broken is None else (STREAMS_APP,):
        async with isolated(bootstrap_servers):
            await create_topics(bootstrap_servers, dict(example.topics))
            ctx = Context(
                system,
                source,
                tmp_path / system,
                bootstrap_servers,
                module_style=example.module_style,
            )
            try:
                observed[system] = await example.run(ctx)
            finally:
                ctx.app.kill()
    if example.differs:
        # The documented difference, exactly: these observations are what it says under each
        # system (and drop out of the comparison), every other one is equal.
        assert example.difference, f"{example.name}: differs without saying how"
        for key, faust_sees, we_see in example.difference:
            seen = (observed["faust"].pop(key), observed[STREAMS_APP].pop(key))
            assert seen == (faust_sees, we_see), (
                f"{example.name}: {key!r} is not the documented difference ({example.differs}):"
                f" faust-streaming observed {seen[0]!r}, streams_app {seen[1]!r}"
            )
    assert observed[STREAMS_APP] == observed["faust"], (
        f"{example.name}: streams_app observed\n{observed[STREAMS_APP]}\nfaust-streaming "
        f"observed\n{observed['faust']}"
    )


def test_every_example_is_accounted_for(faust_examples: Path) -> None:
    """Each example app in the sdist is run, pending on another issue, or excluded with a
    reason; the README's count comes from here."""
    apps = {
        str(p.relative_to(faust_examples))
        for p in faust_examples.rglob("*.py")
        if p.name != "__init__.py" and _is_entry(p)
    }
    known = {e.path for e in EXAMPLES}
    assert apps <= known, f"examples without a driver: {sorted(apps - known)}"
    for example in EXAMPLES:
        assert (faust_examples / example.path).exists(), example.path
        assert bool(example.run) ^ bool(example.excluded or example.pending), example.name
        assert bool(example.differs) == bool(example.difference), example.name
    # The README's promise: make test runs a guide app under both frameworks.
    assert any(app.quick for app in GUIDE_APPS), "no guide app is quick (in make test)"


def _is_entry(path: Path) -> bool:
    """An app file of its own: it makes a faust.App (Django/FastAPI projects count once)."""
    text = path.read_text(errors="replace")
    if "django" in path.parts or "fastapi_project" in path.parts:
        return path.name in ("__main__.py", "main.py") and path.parent.name in (
            "proj",
            "fastapi_project",
        )
    return "faust.App(" in text or "KafkaProducer" in text
