"""The uncommitted-writes budget on the real broker: bursts of distinct keys, each larger than
the budget, under a commit interval far longer than the test, each commit early (every commit
before the test asks for the last one is an early one), and every input is still counted
exactly once."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from streams_app import App
from streams_app.readback import read_topics
from tests.runtime.helpers import KafkaObserver, running_worker, wait_until
from tests.runtime.test_count_basic import count_app

KEYS = 2_000
RECORDS = 3_000
#: Records a burst: distinct keys (7919 is prime to KEYS), their counts well over the budget.
BURST = 300


def budget_app(unique: str, bootstrap: str) -> App:
    """The basic count topology (tests/runtime/test_count_basic.py) with a tiny budget."""
    return count_app(
        unique,
        bootstrap,
        commit_interval=600.0,  # never due by time during this test
        transaction_timeout=900.0,
        max_poll_interval=900.0,  # at least the commit interval (checked at start)
        restore_timeout=1200.0,  # above transaction_timeout (checked at start)
        commit_every=1_000_000,
        state_uncommitted_max_bytes=64 * 1024,  # ~180 pending counts
        # The budget is checked after each fetched batch: small batches, many checks.
        max_poll_records=250,
    )


async def test_a_burst_over_the_budget_commits_early_and_exactly_once(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    app = budget_app(unique, bootstrap_servers)
    keys = [f"k{(i * 7919) % KEYS}" for i in range(RECORDS)]  # every key, some twice
    group = app.conf.id
    async with running_worker(app, tmp_path / "state") as worker:
        committer = worker.committer
        async with app.producer() as producer:
            # One burst at a time, each awaited until a commit has come early since it was
            # sent: how many early commits one long burst makes depends on how it lines up
            # with the polls and with commits in flight (a record processed while a commit is
            # in flight waits for the next one), and the test must not.
            for start in range(0, RECORDS, BURST):
                before = committer.early_commits
                for key in keys[start : start + BURST]:
                    await producer.send(f"in-{unique}", key=key, value=b"x")
                await wait_until(lambda before=before: committer.early_commits > before)
        # Every input processed. With a 600 s interval, every commit so far was an early one.
        # The tail after the last of them stays uncommitted unless its own writes happen to
        # exceed the budget, as it would until the interval is up in production: the test
        # asks for that last commit.
        await wait_until(lambda: worker.records_processed >= RECORDS)
        assert worker.records_processed == RECORDS
        assert committer.early_commits >= RECORDS // BURST
        assert committer.commits == committer.early_commits
        async with KafkaObserver(bootstrap_servers) as observer:
            early = await observer.committed_total(group, f"in-{unique}")
            assert early > 0
            worker.request_commit()
            await wait_until(lambda: observer.committed_equals_end(group, f"in-{unique}"))
        assert worker.memory.uncommitted.checks > 0
        assert worker.memory.uncommitted.max_bytes == 64 * 1024

    changelog_topic = f"{group}-counts-changelog"
    topics = [f"out-{unique}", changelog_topic]
    out = await read_topics(bootstrap_servers, topics)  # read_committed
    expected = Counter(keys)
    per_key: dict[str, list[int]] = {}
    for record in out[f"out-{unique}"]:
        per_key.setdefault(record.key.decode(), []).append(json.loads(record.value))
    assert sum(len(v) for v in per_key.values()) == RECORDS
    assert per_key == {k: list(range(1, n + 1)) for k, n in expected.items()}
    # Table keys are JSON in the changelog (Faust's wire format); record keys raw.
    changelog = out[changelog_topic]
    final = {json.loads(r.key): json.loads(r.value) for r in changelog}
    assert final == dict(expected)
