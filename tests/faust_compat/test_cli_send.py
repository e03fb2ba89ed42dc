"""``send`` on the command line, as Faust's quick start uses it, under faust-streaming and under
streams_app against the same broker:

- plain text to a raw topic goes out as given, and ``@greet`` resolves to the agent's topic: the
  agent receives exactly the text, under both (the same bytes, the same lines printed);
- plain text to a topic of ``str`` values (Faust's JSON) is encoded as that codec expects (a JSON
  string), so its agent receives exactly the text; a JSON string is taken as that string.
  Faust writes the text as given there, which its own agent then fails to decode: streams_app
  only;
- the "Faust setting ... has no effect" warning is a log line on stderr, never on stdout.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.faust_conformance.context import Context, create_topics, isolated
from tests.faust_conformance.runner import FAUST, STREAMS_APP, SYSTEMS

APP = Path(__file__).parent / "apps" / "cli_send.py"
GREETINGS = "cli-greetings"
WORDS = "cli-words"

pytestmark = pytest.mark.kafka


async def _run(ctx: Context, system: str) -> dict[str, object]:
    # As the quick start: `faust -A cli_send send ...`, before the worker runs (it reads the
    # topics from the start).
    ctx.command("send", "@greet", "Hello Faust")
    ctx.command("send", GREETINGS, "Hello Kafka topic")
    texts = ["hello there", '"quoted"', "42", "{not json"]
    if system == STREAMS_APP:
        for text in texts[:2]:
            ctx.command("send", WORDS, text)
        for text in texts[2:]:
            ctx.command("send", "@word", text)
    ctx.start()
    greeted = ["b'Hello Faust'", "b'Hello Kafka topic'"]
    await ctx.wait(lambda: ctx.printed("b'") == greeted, "printed both greetings")
    observed: dict[str, object] = {
        "printed": ctx.printed("b'"),
        "greetings_topic": [r.value for r in await ctx.read(GREETINGS)],
    }
    if system == STREAMS_APP:
        await ctx.wait(lambda: len(ctx.printed("WORD ")) == 4, "printed the four words")
        # Exactly the text; a JSON string as that string.
        assert ctx.printed("WORD ") == [
            "WORD 'hello there'",
            "WORD 'quoted'",
            "WORD '42'",
            "WORD '{not json'",
        ]
        assert [r.value for r in await ctx.read(WORDS)] == [
            b'"hello there"',
            b'"quoted"',
            b'"42"',
            b'"{not json"',
        ]
    ctx.stop()
    return observed


async def test_send_text_and_to_an_agent_under_both(bootstrap_servers: str, tmp_path: Path) -> None:
    observed = {}
    for system in SYSTEMS:
        async with isolated(bootstrap_servers):
            await create_topics(bootstrap_servers, {GREETINGS: 1, WORDS: 1})
            ctx = Context(system, APP, tmp_path / system, bootstrap_servers, module_style=True)
            try:
                observed[system] = await _run(ctx, system)
            finally:
                ctx.app.kill()
    assert observed[STREAMS_APP] == observed[FAUST]
    assert observed[STREAMS_APP]["greetings_topic"] == [b"Hello Faust", b"Hello Kafka topic"]


async def test_send_refuses_what_no_agent_or_topic_takes(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    async with isolated(bootstrap_servers):
        await create_topics(bootstrap_servers, {GREETINGS: 1, WORDS: 1})
        ctx = Context(STREAMS_APP, APP, tmp_path, bootstrap_servers, module_style=True)
        done = ctx.app.run_command("send", "@nobody", "x")
        assert done.returncode == 2
        assert "no agent 'nobody'" in done.stderr and "greet, word" in done.stderr, done.stderr
        assert (await ctx.read(GREETINGS)) == [] and (await ctx.read(WORDS)) == []


async def test_faust_setting_warnings_are_log_lines_on_stderr(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """``python app.py send ...``: the app's module makes its App before the command line is
    read, i.e. before logging is set up; the warning still comes out as a log line, on stderr."""
    async with isolated(bootstrap_servers):
        await create_topics(bootstrap_servers, {GREETINGS: 1, WORDS: 1})
        ctx = Context(STREAMS_APP, APP, tmp_path, bootstrap_servers)
        done = ctx.app.run_command("send", GREETINGS, "hi")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"sent to {GREETINGS}[0] at offset 0"), done.stdout
        assert "Faust setting" not in done.stdout
        warned = [line for line in done.stderr.splitlines() if "Faust setting" in line]
        assert len(warned) == 1, done.stderr
        assert re.fullmatch(
            r"\d{4}-\d\d-\d\d [\d:,]+ WARNING streams_app\.app\.faust_settings: Faust setting "
            r"'stream_buffer_maxsize' has no effect on streams_app: .+",
            warned[0],
        ), warned
        assert [r.value for r in await ctx.read(GREETINGS)] == [b"hi"]
