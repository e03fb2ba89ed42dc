"""Topics that disappear under a running worker: inputs and changelogs.

Every few seconds the worker asks the cluster whether its input topics (agent inputs and
repartition topics) and its tables' changelogs still exist (one Metadata request; a failing
request, e.g. during an outage, is ignored: outages are ``runtime/reconnect.py``'s).

- **An input topic is missing**: the consumer group assigns none of its partitions, so the
  worker has nothing to do and would sit idle for good. It is not ready meanwhile (``/ready``
  names the topic), and once the topic has been missing for ``missing_topic_timeout`` seconds
  the worker stops with :class:`~streams_app.errors.MissingSourceTopic`, as a Kafka Streams
  client does with ``MissingSourceTopicException``. The grace lets an operator recreate a
  topic (e.g. with other settings) without restarting every worker.
- **A changelog is missing**: every commit would fail (the producer has no partition to write
  the table's records to), and recreating it empty would leave the table's history in the local
  stores only. The worker stops at once with :class:`~streams_app.errors.ChangelogMissing`,
  aborting what it had not committed; nothing committed is lost, since the stores hold the
  table. Recreating the changelog and re-seeding it from the stores *while running* could be
  made exactly once, but only with every other worker's stores re-seeded in the same
  transaction; a clear stop and an explicit command (``streams-app -A app changelog reseed``,
  run where the stores are) is the safer promise. At the next start the worker refuses to wipe
  a store whose offset lies beyond its changelog (``state/restore.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping

from streams_app.errors import ChangelogMissing, MissingSourceTopic
from streams_app.transport.base import AdminClient

log = logging.getLogger(__name__)

#: Seconds between two checks (at most: a short missing_topic_timeout checks more often).
CHECK_INTERVAL_S = 5.0


class TopicWatch:
    def __init__(
        self,
        admin: AdminClient,
        inputs: Collection[str],
        changelogs: Mapping[str, str],
        *,
        missing_timeout: float,
        fail: Callable[[BaseException], None],
        interval: float | None = None,
    ) -> None:
        self.admin = admin
        self.inputs = sorted(inputs)
        #: Changelog topic -> its table.
        self.changelogs = {topic: table for table, topic in changelogs.items()}
        self.missing_timeout = missing_timeout
        self.interval = (
            interval if interval is not None else min(CHECK_INTERVAL_S, missing_timeout / 4)
        )
        self._fail = fail
        #: Input topic -> ``time.monotonic()`` since when it has been missing.
        self.missing: dict[str, float] = {}
        self._changelogs_gone: set[str] = set()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.check()

    async def check(self) -> None:
        try:
            existing = await self.admin.partition_counts([*self.inputs, *self.changelogs])
        except Exception as exc:  # the cluster away: not a missing topic
            log.debug("checking the topics failed: %s", exc)
            return
        now = time.monotonic()
        gone = {topic for topic in self.changelogs if topic not in existing}
        # Twice in a row: a topic being recreated by an operator gets one interval's grace.
        confirmed, self._changelogs_gone = gone & self._changelogs_gone, gone
        for topic, table in sorted(self.changelogs.items()):
            if topic in confirmed:
                self._fail(
                    ChangelogMissing(
                        f"changelog topic {topic!r} of table {table!r} was deleted while the "
                        "worker ran. Stopping; what was not committed is aborted, and the local "
                        "stores still hold the committed table. Fix: stop every worker, then "
                        "re-seed the changelog from the stores on every machine holding the "
                        f"table (`streams-app -A <app> changelog reseed {table} --state-dir "
                        "<dir>`), then start the workers again"
                    )
                )
                return
        for topic in self.inputs:
            if topic in existing:
                if self.missing.pop(topic, None) is not None:
                    log.warning("input topic %r exists again", topic)
                continue
            since = self.missing.setdefault(topic, now)
            if since == now:
                log.warning(
                    "input topic %r does not exist: the worker is not ready, and stops if it is "
                    "still missing in %gs (missing_topic_timeout)",
                    topic,
                    self.missing_timeout,
                )
        overdue = [
            t for t, since in sorted(self.missing.items()) if now - since >= self.missing_timeout
        ]
        if overdue:
            self._fail(
                MissingSourceTopic(
                    f"input topic(s) {', '.join(map(repr, overdue))} missing for "
                    f"{self.missing_timeout:g}s (missing_topic_timeout): nothing of them can be "
                    "processed. Fix: create the topic(s) again (with the partition count the "
                    "app expects), or remove the agents reading them; then restart"
                )
            )
