"""What ``/health``, ``/ready`` and ``/assignment`` say about a worker: plain data, no HTTP.

- **health** (Kubernetes liveness): the worker's event loop answers and the worker has not
  stopped or failed. A worker that is restoring for ten minutes is alive.
- **ready** (Kubernetes readiness): started, holding an assignment of the current generation
  (not in the middle of a rebalance), every task restored and running, not stopping. As Kafka
  Streams' ``State.RUNNING``: a worker in a rebalance or a restore is not ready, and its pod
  leaves a Service's endpoints until it is.
- **assignment**: this worker's tasks, their partitions with position / committed / end offsets
  and lag, their table partitions with the changelog offset the local store holds and how they
  were last restored, the standby tasks, and the group's map of which address owns which
  partition.

Nothing here carries settings, record keys or values: these answers are for anyone who can
reach the port.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from streams_app.runtime.lag import partition_lags
from streams_app.runtime.task import RUNNING, Task
from streams_app.state.restore import RestoreResult
from streams_app.transport.base import TopicPartition

if TYPE_CHECKING:
    from streams_app.runtime.worker import Worker


def health(worker: Worker) -> tuple[bool, dict[str, Any]]:
    if worker.error is not None:
        return False, {"status": "failed", "error": type(worker.error).__name__}
    if worker.stopped.is_set():
        return False, {"status": "stopped"}
    return True, {"status": "ok", "app": worker.conf.id}


def readiness(worker: Worker) -> tuple[bool, dict[str, Any]]:
    """(ready, why): the checks in order, the first that fails is the reason."""
    alive, about = health(worker)
    if not alive:
        return False, {"ready": False, "reason": about["status"], **about}
    if not worker.started.is_set():
        return False, {"ready": False, "reason": "starting"}
    if worker.stop_requested:
        return False, {"ready": False, "reason": "stopping"}
    committer = worker._committer
    tasks = worker._tasks
    # An app that reads no topic joins no group (runtime/no_inputs.py): nothing to wait for.
    grouped = worker.plan is None or bool(worker.plan.input_topics)
    if committer is None or tasks is None or (committer.group is None and grouped):
        return False, {"ready": False, "reason": "waiting for an assignment (rebalancing)"}
    restoring = [str(t.id) for t in tasks.tasks.values() if t.state != RUNNING]
    if restoring:
        return False, {"ready": False, "reason": "restoring", "restoring_tasks": restoring}
    return True, {
        "ready": True,
        "generation": committer.group.generation_id if committer.group else None,
        "tasks": len(tasks.tasks),
    }


def _restored(result: RestoreResult | None) -> dict[str, Any] | None:
    """How a task's table partition was last brought up to date here: the changelog offset
    its store held, the range read (equal ends: nothing to read, as after a failover to a
    caught-up standby; ``from_offset`` 0 with a long changelog: a restore from scratch)."""
    if result is None:
        return None
    return {
        "stored_offset": result.stored_offset,
        "from_offset": result.from_offset,
        "to_offset": result.to_offset,
        "records": result.records,
        "wiped": result.wiped,
    }


def _task_view(
    task: Task, worker: Worker, lags: dict[Any, Any], restores: dict[Any, RestoreResult]
) -> dict[str, Any]:
    plan = worker.plan
    partitions = []
    for tp in sorted(task.partitions):
        entry = lags.get(tp)
        partitions.append(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "position": task.offsets.get(tp),
                "committed": task.committed.get(tp),
                "end": entry.end if entry else None,
                "lag": entry.lag if entry else None,
            }
        )
    tables = []
    if plan is not None:
        for name in plan.tables_by_group.get(task.id.group, ()):
            store = worker.stores.get(name)
            changelog = plan.changelog_topics[name]
            tables.append(
                {
                    "table": name,
                    "changelog": changelog,
                    "partition": task.id.partition,
                    "changelog_offset": (
                        store.partition(task.id.partition).changelog_offset if store else None
                    ),
                    "restored": _restored(
                        restores.get(TopicPartition(changelog, task.id.partition))
                    ),
                }
            )
    return {"id": str(task.id), "state": task.state, "partitions": partitions, "tables": tables}


def assignment(worker: Worker) -> dict[str, Any]:
    tasks = worker._tasks
    committer = worker._committer
    group = committer.group if committer is not None else None
    lags = {}
    if tasks is not None and worker._consumer is not None:
        lags = {entry.tp: entry for entry in partition_lags(tasks, worker.consumer)}
    # The latest restore of each changelog partition (every one, those with nothing to read
    # too: a task taken over from an up-to-date standby reads nothing).
    restores = {r.changelog: r for r in tasks.restores} if tasks is not None else {}
    active = (
        [_task_view(task, worker, lags, restores) for _, task in sorted(tasks.tasks.items())]
        if tasks is not None
        else []
    )
    hosts: dict[str, dict[str, list[int]]] = defaultdict(dict)
    if worker._consumer is not None:
        for tp, address in sorted(worker.consumer.partition_hosts().items()):
            hosts[address].setdefault(tp.topic, []).append(tp.partition)
    return {
        "app": worker.conf.id,
        "url": worker.web_url,
        "member_id": group.member_id if group else None,
        "generation": group.generation_id if group else None,
        "tasks": active,
        # Standby and warm-up tasks (runtime/standby.py): changelog offsets applied, lag behind
        # the changelogs' end as last measured, records applied since placed here.
        "standbys": worker.replicas.describe()["standby"] if worker.replicas is not None else [],
        "fenced": list(worker.replicas.fenced) if worker.replicas is not None else [],
        "hosts": dict(hosts),
    }
