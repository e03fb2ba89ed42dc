"""In-place switch: a Faust word count (a table and a group_by) runs under faust-streaming, is
stopped, and the same app under streams_app continues from Faust's committed offsets and Faust's
changelog state, with no loss and no double count."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from tests.faust_conformance.context import Context, create_topics
from tests.faust_conformance.runner import FAUST, STREAMS_APP

APP = Path(__file__).parent / "apps" / "switch_wordcount.py"
VOCABULARY = [f"w{i:02d}" for i in range(20)]
GROUP = "switch-wc"
SENTENCES = "switch-sentences"
WORDS = "switch-words"
REPARTITION = "switch_wordcount.count-switch-words-word-repartition"
CHANGELOG = "switch-wc-word-counts-changelog"

pytestmark = pytest.mark.kafka


def _sentences(rng: random.Random, count: int) -> list[str]:
    return [" ".join(rng.choice(VOCABULARY) for _ in range(5)) for _ in range(count)]


async def test_faust_app_switches_in_place(bootstrap_servers: str, tmp_path: Path) -> None:
    # Faust creates only its internal topics, and ignores one that appears after it joined;
    # create them all first (the changelog compacted, as Faust would).
    await create_topics(bootstrap_servers, {SENTENCES: 4, WORDS: 4, REPARTITION: 4})
    await create_topics(bootstrap_servers, {CHANGELOG: 4}, compact=True)
    rng = random.Random(11)
    first, second = _sentences(rng, 150), _sentences(rng, 150)

    faust = Context(FAUST, APP, tmp_path / "faust", bootstrap_servers)
    await faust.produce(SENTENCES, [(None, json.dumps(s).encode()) for s in first])
    faust.start()
    expected_first = Counter(w for s in first for w in s.split())

    async def faust_done() -> bool:
        state = {k: v for (_, k), v in (await faust.table(CHANGELOG)).items()}
        return state == dict(expected_first) and await faust.committed_all(
            GROUP, [SENTENCES, WORDS, REPARTITION]
        )

    await faust.wait(faust_done, "counted the first sentences under faust-streaming", 240)
    faust.stop()
    faust_end: dict[int, int] = {}
    for record in await faust.read(CHANGELOG):
        faust_end[record.partition] = record.offset + 1
    assert not faust.app.running

    # More input while nothing runs, then the same app under streams_app.
    ours = Context(STREAMS_APP, APP, tmp_path / "streams_app", bootstrap_servers)
    await ours.produce(SENTENCES, [(None, json.dumps(s).encode()) for s in second])
    ours.start()
    expected = expected_first + Counter(w for s in second for w in s.split())

    async def ours_done() -> bool:
        state = {k: v for (_, k), v in (await ours.table(CHANGELOG)).items()}
        return state == dict(expected) and await ours.committed_all(
            GROUP, [SENTENCES, WORDS, REPARTITION]
        )

    await ours.wait(ours_done, "continued the count under streams_app", 180)
    ours.stop()

    # Continued from Faust's offsets: each sentence split once, each word counted once.
    assert len(await ours.read(WORDS)) == 5 * (len(first) + len(second))
    assert len(await ours.read(REPARTITION)) == 5 * (len(first) + len(second))
    # Continued from Faust's state: streams_app restored Faust's changelog (it says so), and
    # its own changelog records only ever go up from Faust's last value of each key.
    log = ours.app.output()
    assert "restored switch-wc-word-counts-changelog" in log
    records = await ours.read(CHANGELOG)
    by_faust = [r for r in records if r.offset < faust_end.get(r.partition, 0)]
    by_ours = [r for r in records if r.offset >= faust_end.get(r.partition, 0)]
    faust_last: dict[str, int] = {}
    for record in by_faust:
        faust_last[json.loads(record.key)] = json.loads(record.value)
    assert faust_last == dict(expected_first)
    assert by_ours, "streams_app wrote nothing to the changelog"
    for record in by_ours:
        key, value = json.loads(record.key), json.loads(record.value)
        assert value > faust_last.get(key, 0), (key, value)
        faust_last[key] = value
    assert faust_last == dict(expected)
