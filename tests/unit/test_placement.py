"""Placement of active tasks, standbys and warm-ups (pure logic of runtime/placement.py), and the
assignor's user data and topic-to-task mapping (runtime/assignor.py), without a broker."""

from __future__ import annotations

from collections import Counter

from streams_app.runtime.assignor import AssignmentInfo, StreamsAssignor, SubscriptionInfo
from streams_app.runtime.placement import Client, PlacementConfig, place
from streams_app.runtime.task import TaskId
from streams_app.runtime.topology import TopologyPlan
from streams_app.transport.base import MemberSubscription, TopicPartition

T = [TaskId(0, p) for p in range(4)]
ENDS = dict.fromkeys(T, 1000)


def owners(result: dict[str, object], kind: str) -> dict[TaskId, list[str]]:
    out: dict[TaskId, list[str]] = {}
    for cid, p in result.items():
        for task in getattr(p, kind):
            out.setdefault(task, []).append(cid)
    return out


def test_every_task_has_exactly_one_active_owner_and_load_is_even() -> None:
    clients = [Client(c) for c in "abc"]
    tasks = [TaskId(0, p) for p in range(8)] + [TaskId(1, p) for p in range(3)]
    ends = {t: 0 for t in tasks if t.group == 0}  # group 1 is stateless
    result = place(tasks, ends, clients, PlacementConfig())
    active = owners(result, "active")
    assert sorted(active) == sorted(tasks)
    assert all(len(v) == 1 for v in active.values())
    stateful = Counter(o for t, (o,) in active.items() if t.group == 0)
    assert sorted(stateful.values()) == [2, 3, 3]
    stateless = Counter(o for t, (o,) in active.items() if t.group == 1)
    assert sorted(stateless.values()) == [1, 1, 1]


def test_sticky_previous_owners_keep_their_tasks() -> None:
    a = Client("a", previous_active=frozenset(T[:2]), offsets={T[0]: 1000, T[1]: 1000})
    b = Client("b", previous_active=frozenset(T[2:]), offsets={T[2]: 1000, T[3]: 1000})
    result = place(T, ENDS, [a, b], PlacementConfig(standby_replicas=1))
    assert result["a"].active == set(T[:2])
    assert result["b"].active == set(T[2:])
    # and each holds a standby of the other's tasks
    assert result["a"].standby == set(T[2:])
    assert result["b"].standby == set(T[:2])


def test_failover_goes_to_the_caught_up_standby_not_to_an_empty_worker() -> None:
    # "a" died; "b" held standbys of a's tasks (caught up), "c" is new and empty.
    b = Client(
        "b",
        previous_active=frozenset(T[2:]),
        offsets={T[0]: 990, T[1]: 995, T[2]: 1000, T[3]: 1000},
    )
    c = Client("c")
    result = place(T, ENDS, [b, c], PlacementConfig(standby_replicas=1, acceptable_recovery_lag=50))
    assert result["b"].active == set(T)  # availability before balance
    # balance would put two tasks on c: it warms them up instead
    assert len(result["c"].warmup) == 2
    assert result["c"].active == set()


def test_no_warm_up_beyond_max_warmup_replicas() -> None:
    a = Client("a", previous_active=frozenset(T), offsets=dict.fromkeys(T, 1000))
    new = [Client(c) for c in "bcd"]
    result = place(
        T, ENDS, [a, *new], PlacementConfig(max_warmup_replicas=1, acceptable_recovery_lag=10)
    )
    assert result["a"].active == set(T)
    assert sum(len(p.warmup) for p in result.values()) == 1


def test_a_caught_up_warm_up_takes_its_task() -> None:
    a = Client("a", previous_active=frozenset(T), offsets=dict.fromkeys(T, 1000))
    b = Client("b", offsets={T[1]: 999, T[3]: 400})  # caught up on T1 only
    result = place(T, ENDS, [a, b], PlacementConfig(acceptable_recovery_lag=10))
    assert T[1] in result["b"].active
    assert T[3] not in result["b"].active
    assert len(result["b"].active) + len(result["a"].active) == 4


def test_the_running_owner_counts_as_caught_up_whatever_its_offsets() -> None:
    # Its store stops before the commit markers (and its own open transaction): with an
    # acceptable lag of 0 it is still the one caught-up worker, so the newcomer warms up.
    a = Client("a", previous_active=frozenset(T), offsets=dict.fromkeys(T, 990))
    b = Client("b")
    result = place(T, ENDS, [a, b], PlacementConfig(acceptable_recovery_lag=0))
    assert result["a"].active == set(T)
    assert len(result["b"].warmup) == 2
    assert result["b"].active == set()


def test_when_nobody_is_caught_up_the_least_behind_restores() -> None:
    b = Client("b", offsets={T[0]: 500})
    c = Client("c", offsets={T[0]: 100})
    result = place([T[0]], {T[0]: 1000}, [b, c], PlacementConfig(acceptable_recovery_lag=10))
    assert result["b"].active == {T[0]}
    assert not result["c"].warmup  # a warm-up needs a caught-up client to keep the task


def test_standbys_go_to_distinct_other_clients_and_prefer_warm_ones() -> None:
    clients = [
        Client("a", previous_active=frozenset({T[0]}), offsets={T[0]: 1000}),
        Client("b", offsets={T[0]: 999}),
        Client("c"),
        Client("d", offsets={T[0]: 10}),
    ]
    result = place([T[0]], {T[0]: 1000}, clients, PlacementConfig(standby_replicas=2))
    standbys = owners(result, "standby")[T[0]]
    assert "a" not in standbys and len(set(standbys)) == 2
    assert set(standbys) == {"b", "d"}


def test_clients_that_miss_a_groups_topics_get_none_of_its_tasks() -> None:
    clients = [Client("a", groups=frozenset({0})), Client("b", groups=frozenset({0, 1}))]
    tasks = [TaskId(0, 0), TaskId(0, 1), TaskId(1, 0), TaskId(1, 1)]
    result = place(tasks, {}, clients, PlacementConfig())
    assert not any(t.group == 1 for t in result["a"].active)


def test_user_data_round_trips_and_foreign_bytes_are_ignored() -> None:
    sub = SubscriptionInfo("p1", "app-p1", frozenset({T[0]}), {T[0]: 12}, {"p0": "app-p0"})
    assert SubscriptionInfo.decode(sub.encode()) == sub
    info = AssignmentInfo(
        active=frozenset({T[1]}),
        standby=frozenset({T[2]}),
        warmup=frozenset({T[3]}),
        lags={T[2]: 5, T[3]: -1},
        members={"p1": "app-p1"},
        fence=("app-p0",),
        probe_after=600.0,
    )
    decoded = AssignmentInfo.decode(info.encode())
    assert decoded is not None
    assert (decoded.active, decoded.standby, decoded.warmup) == (
        info.active,
        info.standby,
        info.warmup,
    )
    assert (decoded.lags, decoded.members, decoded.fence, decoded.probe_after) == (
        info.lags,
        info.members,
        info.fence,
        info.probe_after,
    )
    assert SubscriptionInfo.decode(b"") is None
    assert SubscriptionInfo.decode(b'{"pid": "x"}') is None  # not ours: no magic
    assert AssignmentInfo.decode(b"SA1{not json") is None


def _assignor(pid: str, offsets: dict[TaskId, int], replicas: int = 1) -> StreamsAssignor:
    plan = TopologyPlan(
        input_topics=["in", "other"],
        partition_counts={"in": 4, "other": 4, "chg": 4, "solo": 2},
        groups={2: 0, 4: 1},
        changelog_topics={"t": "chg"},
        tables_by_group={1: ["t"]},
    )

    async def ends(tps: object) -> dict[TopicPartition, int]:
        return {}

    return StreamsAssignor(
        plan,
        process_id=pid,
        transactional_id=f"app-{pid}",
        local_offsets=lambda: offsets,
        end_offsets=ends,
        placement=PlacementConfig(standby_replicas=replicas),
        probing_interval=60.0,
    )


def test_assignor_keeps_co_partitioned_topics_together_and_fences_departed_members() -> None:
    a = _assignor("pa", {})
    b = _assignor("pb", {})
    a.ends = {TopicPartition("chg", p): 100 for p in range(4)}
    # b remembers a generation with a third member "pc" that is gone now.
    b.last = AssignmentInfo(members={"pa": "app-pa", "pb": "app-pb", "pc": "app-pc"})
    topics = ("in", "other", "solo")
    members = {
        "m-a": MemberSubscription(topics, a.subscription_data()),
        "m-b": MemberSubscription(topics, b.subscription_data()),
    }
    out = a.assign(members, {"in": 4, "other": 4, "solo": 2})
    seen: dict[tuple[str, int], str] = {}
    for member, assignment in out.items():
        for tp in assignment.partitions:
            assert (tp.topic, tp.partition) not in seen
            seen[(tp.topic, tp.partition)] = member
    assert len(seen) == 4 + 4 + 2
    for p in range(4):  # partition p of every 4-partition topic: one owner
        assert seen[("in", p)] == seen[("other", p)]
    infos = {m: AssignmentInfo.decode(x.user_data) for m, x in out.items()}
    for member, info in infos.items():
        assert info is not None
        assert info.fence == ("app-pc",)
        assert set(info.members) == {"pa", "pb"}
        # the active task ids match the partitions, and standbys are of the other's tasks
        assert {TaskId(1, tp.partition) for tp in out[member].partitions if tp.topic == "in"} == {
            t for t in info.active if t.group == 1
        }
    assert infos["m-a"] is not None and infos["m-b"] is not None
    assert infos["m-a"].standby == {t for t in infos["m-b"].active if t.group == 1}


def test_a_worker_without_state_counts_as_caught_up_on_a_short_changelog() -> None:
    a = Client("a", previous_active=frozenset(T), offsets=dict.fromkeys(T, 1000))
    b = Client("b")
    result = place(T, ENDS, [a, b], PlacementConfig(acceptable_recovery_lag=1000))
    assert len(result["b"].active) == 2  # 1000 records to restore is acceptable: move now
    assert not result["b"].warmup


def test_web_addresses_travel_next_to_the_assignor_user_data() -> None:
    from streams_app.kafka.assignor import decode_subscription, encode_subscription
    from streams_app.kafka.assignor import frame_user_data as _frame
    from streams_app.kafka.assignor import unframe_user_data as _unframe

    assert _unframe(_frame(b"SA1{}", b"S1{...}")) == (b"SA1{}", b"S1{...}")
    assert _unframe(_frame(b"", b"")) == (b"", b"")
    # Operators' tools read the address under either protocol (status' WEB column).
    address = encode_subscription("http://127.0.0.1:6066")
    assert decode_subscription(address) == "http://127.0.0.1:6066"
    assert decode_subscription(_frame(b"SA1{}", address)) == "http://127.0.0.1:6066"
    assert decode_subscription(_frame(b"SA1{}", b"")) is None
    # Bytes that are not ours (too short, or a length past the end) are passed through whole.
    assert _unframe(b"ab") == (b"ab", b"")
    assert _unframe(b"\xff\xff\xff\xffxyz") == (b"\xff\xff\xff\xffxyz", b"")
