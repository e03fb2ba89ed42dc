"""A commit whose EndTxn the broker accepted, but whose answer the worker never saw.

A broker that goes away mid-commit (the 2-minute outage of ``test_outage``) can complete an
EndTxn it accepted when it comes back, while the worker sees only an error. The worker must
not take that for an abort: rewinding to the offsets it holds would process committed records
a second time (seen in CI as duplicates after an outage). It reads its committed offsets again
instead, as after a fencing (``runtime.commit.MIGRATED``).

The fault is made exact here: the worker's transactional producer commits for real, then
raises, on its first commit.
"""

from __future__ import annotations

from pathlib import Path

from streams_app.transport.base import ProducerConfig, TopicSpec
from streams_app.transport.errors import TransportError
from streams_app.transport.kafka import KafkaProducerClient, KafkaTransport
from tests.kafka.helpers import create_topics
from tests.runtime.helpers import running_worker, wait_until
from tests.runtime.test_errors import RECORDS, failing_app, feed, outputs


class _AnswerLost(KafkaProducerClient):
    """Commits, then reports a failure: the answer to the first EndTxn is lost."""

    lost = 0

    async def commit_transaction(self) -> None:
        await super().commit_transaction()
        if _AnswerLost.lost == 0:
            _AnswerLost.lost += 1
            raise TransportError("connection to the transaction coordinator lost (injected)")


class _Transport(KafkaTransport):
    def producer(self, config: ProducerConfig) -> KafkaProducerClient:
        if config.transactional_id is None:
            return super().producer(config)
        return _AnswerLost(self._bootstrap, config, self._security, self.principal)


async def test_a_commit_whose_answer_was_lost_is_not_processed_again(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    attempts: dict[int, int] = {}
    app = failing_app(unique, bootstrap_servers, attempts, fail_times=0)
    # Fed before the worker starts: its first transaction carries these records.
    await create_topics(bootstrap_servers, TopicSpec(f"in-{unique}", 2, 1))
    await feed(app, f"in-{unique}", RECORDS)
    _AnswerLost.lost = 0
    async with running_worker(app, tmp_path / "s", transport=_Transport(bootstrap_servers)) as w:

        async def done() -> bool:
            return len((await outputs(bootstrap_servers, unique))["sum"]) >= 5

        await wait_until(done)
        # Past the failure: rejoined and restored (or, the mistake this test catches, the
        # records processed a second time from the offsets held in memory).
        await wait_until(
            lambda: (
                _AnswerLost.lost == 1
                and (w.metrics.rebalances >= 2 or w.records_processed >= 2 * len(RECORDS))
                and not w.tasks.restoring()
            )
        )
    assert _AnswerLost.lost == 1, "the fault never fired: the test checked nothing"
    out = await outputs(bootstrap_servers, unique)
    assert [v for _, v in out["echo"]] == [1, 2, 13, 4, 5]
    assert out["sum"] == [("a", 1), ("a", 3), ("a", 16), ("a", 20), ("b", 5)]
