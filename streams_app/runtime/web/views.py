"""What ``/health``, ``/ready`` and ``/assignment`` say about a worker: plain data, no HTTP.

- **health** (Kubernetes liveness): the worker's event loop answers, the worker has not
  stopped or failed, and it is not wedged (an agent busy or no commit while input waits, for
  ``liveness_timeout``). A worker that is restoring for ten minutes, or waiting out a broker
  outage, is alive.
- **ready** (Kubernetes readiness): the worker can make progress: started, the cluster
  reachable, its input topics there, holding an assignment of the current generation, every
  task restored and running, no agent busy and no stall past the stall bound, not stopping.
  The reasons and their order: :mod:`streams_app.runtime.health`.
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

from streams_app.runtime.health import liveness
from streams_app.runtime.health import readiness as health_readiness
from streams_app.runtime.lag import partition_lags
from streams_app.runtime.task import Task
from streams_app.state.restore import RestoreResult
from streams_app.transport.base import TopicPartition

if TYPE_CHECKING:
    from streams_app.runtime.view import WorkerView


def health(worker: WorkerView) -> tuple[bool, dict[str, Any]]:
    """Liveness (:func:`streams_app.runtime.health.liveness`): 503 once stopped, failed, or
    wedged past ``liveness_timeout``."""
    verdict = liveness(worker)
    if verdict.ok:
        return True, {"status": "ok", **verdict.details}
    return False, {"status": verdict.reason, **verdict.details}


def readiness(worker: WorkerView) -> tuple[bool, dict[str, Any]]:
    """(ready, why): the first reason of :mod:`streams_app.runtime.health` that applies."""
    verdict = health_readiness(worker)
    return verdict.ok, verdict.body("ready")


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
    task: Task, worker: WorkerView, lags: dict[Any, Any], restores: dict[Any, RestoreResult]
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


def assignment(worker: WorkerView) -> dict[str, Any]:
    parts = worker.parts
    group = parts.committer.group if parts is not None else None
    lags = {}
    active = []
    hosts: dict[str, dict[str, list[int]]] = defaultdict(dict)
    if parts is not None:
        tasks = parts.tasks
        lags = {entry.tp: entry for entry in partition_lags(tasks, parts.consumer)}
        # The latest restore of each changelog partition (every one, those with nothing to
        # read too: a task taken over from an up-to-date standby reads nothing).
        restores = tasks.restores
        active = [
            _task_view(task, worker, lags, restores) for _, task in sorted(tasks.tasks.items())
        ]
        for tp, address in sorted(parts.consumer.partition_hosts().items()):
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
