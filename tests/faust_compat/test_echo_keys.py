"""``stream.echo(topic)`` under faust-streaming and under streams_app, against the same broker.

Both copy every value. Faust sends the copy with ``key=None`` (its ``echo`` sends the value
alone), so the copies of one key scatter over the partitions and lose their order. streams_app
keeps the input record's key, as it does for sinks (docs/migrating-from-faust.md): a copy lands
in the partition of the same number as its input (equal partition counts), in the input's
order, and an agent reading the copies can use a table (which needs the record's key).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.faust_conformance.context import Context, create_topics, isolated
from tests.faust_conformance.runner import FAUST, STREAMS_APP, SYSTEMS

APP = Path(__file__).parent / "apps" / "echo_keys.py"
SOURCE, COPIES = "echo-keys-in", "echo-keys-out"
RECORDS = [(f"k{i % 10}".encode(), str(i).encode()) for i in range(60)]

pytestmark = pytest.mark.kafka


async def _run(ctx: Context) -> dict[str, object]:
    await ctx.produce(SOURCE, RECORDS)
    ctx.start()

    async def copied() -> bool:
        return len(await ctx.read(COPIES)) == len(RECORDS)

    await ctx.wait(copied, "echoed every record")
    ctx.stop()
    inputs = await ctx.read(SOURCE)
    copies = await ctx.read(COPIES)
    partition_of = {r.key: r.partition for r in inputs}
    return {
        "values": sorted(json.loads(r.value or b"null") for r in copies),
        "keys": Counter(r.key for r in copies),
        "same_partition_as_input": all(partition_of.get(r.key) == r.partition for r in copies),
        "in_input_order": all(
            [r.value for r in copies if r.key == key] == [r.value for r in inputs if r.key == key]
            for key in partition_of
        ),
    }


async def test_echo_keeps_the_input_key_where_faust_sends_none(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    observed = {}
    for system in SYSTEMS:
        async with isolated(bootstrap_servers):
            await create_topics(bootstrap_servers, {SOURCE: 4, COPIES: 4})
            ctx = Context(system, APP, tmp_path / system, bootstrap_servers)
            try:
                observed[system] = await _run(ctx)
            finally:
                ctx.app.kill()
    faust, ours = observed[FAUST], observed[STREAMS_APP]
    assert ours["values"] == faust["values"] == list(range(len(RECORDS)))
    assert faust["keys"] == Counter({None: len(RECORDS)})
    assert ours["keys"] == Counter(key for key, _ in RECORDS)
    assert ours["same_partition_as_input"] and ours["in_input_order"]
