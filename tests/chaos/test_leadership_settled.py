"""Leaderships are moved off the coordinators on what every broker shows (unit test).

Found by a whole `make test` run (2026-12-02): `test_partitions.py`'s coordinators cut planned
"0 leaderships moved off them, 0 still on them" right after the bench created its topics, then
found partitions led by both coordinators. A broker that has not applied a new topic yet answers
without its partitions, and the planner took that answer for the whole truth. Here a fake
admin client stands for three brokers whose metadata the test controls (the real cluster case
is `test_partitions.py`): one of them does not know a topic for its first answers.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from streams_app.chaos import leadership

AVOID = 3
TOPICS = ("data", "out")


class FakeCluster:
    """Three brokers; every partition's replicas are (3, 1, 2), so 3 leads them all. Broker
    ``lagging`` does not know topic ``out`` for its first ``lag`` metadata answers."""

    def __init__(self, lagging: int, lag: int) -> None:
        self.parts = {(t, p): [3, 1, 2] for t in TOPICS for p in range(2)}
        self.leader = {tp: replicas[0] for tp, replicas in self.parts.items()}
        self.lagging, self.lag = lagging, lag
        self.brokers = [SimpleNamespace(nodeId=n) for n in (1, 2, 3)]

    def topics(self, node: int | None) -> list[dict[str, Any]]:
        known = [t for t in TOPICS if not (node == self.lagging and self.lag > 0 and t == "out")]
        if node == self.lagging:
            self.lag -= 1
        out = [
            {
                "error_code": 0,
                "topic": t,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition": p,
                        "leader": self.leader[t, p],
                        "replicas": self.parts[t, p],
                        "isr": self.parts[t, p],
                    }
                    for (topic, p) in self.parts
                    if topic == t
                ],
            }
            for t in known
        ]
        out += [{"error_code": 3, "topic": t, "partitions": []} for t in TOPICS if t not in known]
        return out


class FakeAdmin:
    cluster: FakeCluster

    def __init__(self, **_: Any) -> None:
        self._client = SimpleNamespace(
            cluster=SimpleNamespace(brokers=lambda: self.cluster.brokers)
        )

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def describe_topics(self, topics: list[str]) -> list[dict[str, Any]]:
        return self.cluster.topics(self.cluster.lagging)  # the lagging broker answers

    async def _send_request(self, request: Any, node: int) -> Any:
        topics = self.cluster.topics(node)
        return SimpleNamespace(to_object=lambda: {"topics": topics})

    async def _send_to_controller(self, request: Any) -> Any:
        if isinstance(request, leadership.ElectLeadersRequest):
            for topic, partitions in request._partitions.items():
                for p in partitions:
                    self.cluster.leader[topic, p] = self.cluster.parts[topic, p][0]
            return SimpleNamespace(replica_election_results=[])
        for topic, parts, _tags in request._topics:
            for p, order, _ in parts:
                self.cluster.parts[topic, p] = list(order)
        return SimpleNamespace(responses=[])


async def test_a_topic_one_broker_does_not_know_yet_is_waited_for_and_moved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = FakeCluster(lagging=2, lag=2)
    FakeAdmin.cluster = cluster
    monkeypatch.setattr(leadership, "AIOKafkaAdminClient", FakeAdmin)
    sleeps: list[float] = []
    real_sleep = asyncio.sleep

    async def no_wait(seconds: float) -> None:
        sleeps.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(leadership.asyncio, "sleep", no_wait)

    moved, left = await leadership.move_leaders_off("fake:9092", TOPICS, [AVOID], timeout=30.0)

    assert (moved, left) == (4, 0)  # both topics' partitions, "out" included
    assert all(leader != AVOID for leader in cluster.leader.values()), cluster.leader
    assert sleeps, "the planner did not wait for the lagging broker"


async def test_brokers_that_never_settle_report_what_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = FakeCluster(lagging=2, lag=10**9)
    FakeAdmin.cluster = cluster
    monkeypatch.setattr(leadership, "AIOKafkaAdminClient", FakeAdmin)

    moved, left = await leadership.move_leaders_off("fake:9092", TOPICS, [AVOID], timeout=0.0)

    # Nothing moved on an unsettled view, and the partitions the answering broker shows led by
    # the avoided one are reported as left on it.
    assert (moved, left) == (0, 2)
    assert set(cluster.leader.values()) == {AVOID}
