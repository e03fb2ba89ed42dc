"""Whether a worker can make progress, and why not: what ``/ready``, ``/health`` and the
stall metrics say (plain data; ``runtime/web`` turns it into HTTP and Prometheus).

**Ready** means: this worker processes and commits what reaches it. It is *not* ready, with
the first reason that applies, while:

1. it is starting, stopping, or has stopped or failed;
2. the cluster is unreachable: none of its bootstrap servers answers, or its producer is
   being started again and cannot reach the cluster (``runtime/reconnect.py``);
3. an input topic is missing (``runtime/topic_watch.py``): the group assigns it nothing;
4. it holds no assignment of the current generation (a rebalance);
5. a task restores its tables;
6. an agent has been busy on what it was handed for longer than the stall bound
   (``stall_intervals`` commit intervals); ``processing_timeout`` fails its record later;
7. it is *stalled*: no commit point (a commit, or finding nothing to commit) for longer than the
   stall bound while input waits (records not yet processed, or processed and not committed).

**Alive** (``/health``, a liveness probe) means: not stopped or failed, and not *wedged*: an
agent busy (6) or a stall (7) that has lasted ``liveness_timeout`` seconds. Those are the states
a restart may cure. An outage (2), a missing topic (3), a rebalance (4) and a restore (5) are
not: a restarted worker would wait for the same thing, and the worker ends a missing topic
itself after ``missing_topic_timeout``.

A stall counts from the last sign of progress (``WorkerMetrics.progress_at``: a commit point or
a finished restore). A healthy worker reaches a commit point every commit interval, idle or not,
so the stall bound is a number of commit intervals (``stall_intervals``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from streams_app.runtime.lag import input_waiting
from streams_app.runtime.task import RUNNING

if TYPE_CHECKING:
    from streams_app.runtime.view import WorkerView


@runtime_checkable
class Reachability(Protocol):
    """What a transport may say about the cluster (the Kafka transport does)."""

    def unreachable_since(self) -> float | None: ...


@dataclass(frozen=True)
class Verdict:
    ok: bool
    #: Short and stable (what alerts match on), e.g. ``stalled``; None when ok.
    reason: str | None = None
    #: Everything else the answer carries (no record data: names, coordinates, seconds).
    details: dict[str, Any] = field(default_factory=dict)

    def body(self, key: str) -> dict[str, Any]:
        out: dict[str, Any] = {key: self.ok}
        if self.reason is not None:
            out["reason"] = self.reason
        out.update(self.details)
        return out


def _failed_or_stopped(worker: WorkerView) -> Verdict | None:
    if worker.error is not None:
        return Verdict(False, "failed", {"error": type(worker.error).__name__})
    if worker.stopped.is_set():
        return Verdict(False, "stopped")
    return None


def unreachable(worker: WorkerView) -> Verdict | None:
    """The cluster does not answer (reason 2 of the module docstring)."""
    transport = worker.transport
    since = transport.unreachable_since() if isinstance(transport, Reachability) else None
    if since is not None:
        return Verdict(
            False,
            "broker unreachable",
            {
                "brokers": transport_address(worker),
                "since": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since)),
                "seconds": round(time.time() - since, 1),
            },
        )
    reconnect = worker.reconnect
    if reconnect.since is not None:
        return Verdict(
            False,
            "broker unreachable",
            {
                "brokers": transport_address(worker),
                "waiting": reconnect.waiting,
                "seconds": round(time.monotonic() - reconnect.since, 1),
            },
        )
    return None


def transport_address(worker: WorkerView) -> str:
    return worker.transport.address


def busy_agents(worker: WorkerView, bound: float) -> list[dict[str, Any]]:
    """Agents the worker has been waiting for longer than ``bound`` seconds, with the record
    each holds (coordinates only)."""
    out = []
    for actor, seconds in worker.watchdog.busy():
        if seconds < bound:
            continue
        event = actor.input.in_hand
        out.append(
            {
                "agent": actor.name,
                "record": (
                    f"{event.topic}[{event.partition}]@{event.offset}"
                    if event is not None and event.offset >= 0
                    else None
                ),
                "seconds": round(seconds, 1),
            }
        )
    return out


def any_input_waiting(worker: WorkerView) -> bool:
    """Records reached this worker that are not committed as processed: handed to agents that
    are not done, processed and not committed, or on the broker past the committed offset."""
    parts = worker.parts
    if parts is None:
        return False
    if not worker.agents_idle():
        return True
    return any(input_waiting(task, parts.consumer) for task in parts.tasks.running())


def stalled_for(worker: WorkerView) -> float | None:
    """Seconds since the last sign of progress while input waits (None: not stalled)."""
    seconds = time.monotonic() - worker.metrics.progress_at
    if seconds < worker.conf.stall_seconds or not any_input_waiting(worker):
        return None
    return seconds


def _stuck(worker: WorkerView) -> Verdict | None:
    """Reasons 6 and 7: what a restart may cure, once it has lasted long enough."""
    conf = worker.conf
    busy = busy_agents(worker, conf.stall_seconds)
    if busy:
        return Verdict(
            False,
            "agent busy",
            {
                "agents": busy,
                "processing_timeout": conf.effective_processing_timeout,
                "seconds": max(b["seconds"] for b in busy),
            },
        )
    stalled = stalled_for(worker)
    if stalled is not None:
        return Verdict(
            False,
            "stalled",
            {
                "detail": f"no commit for {stalled:.1f}s while input waits",
                "seconds": round(stalled, 1),
                "stall_seconds": conf.stall_seconds,
            },
        )
    return None


def readiness(worker: WorkerView) -> Verdict:
    """Ready, or the first reason of the module docstring that applies."""
    verdict = _failed_or_stopped(worker)
    if verdict is not None:
        return verdict
    if not worker.started.is_set():
        return Verdict(False, "starting")
    if worker.stop_requested:
        return Verdict(False, "stopping")
    verdict = unreachable(worker)
    if verdict is not None:
        return verdict
    watch = worker.topic_watch
    if watch is not None and watch.missing:
        now = time.monotonic()
        return Verdict(
            False,
            "input topic missing",
            {
                "topics": sorted(watch.missing),
                "seconds": round(now - min(watch.missing.values()), 1),
                "stops_after": watch.missing_timeout,
            },
        )
    parts = worker.parts
    # An app that reads no topic joins no group (runtime/no_inputs.py): nothing to wait for.
    if parts is None or (parts.committer.group is None and parts.plan.input_topics):
        return Verdict(False, "waiting for an assignment (rebalancing)")
    committer, tasks = parts.committer, parts.tasks
    restoring = [str(t.id) for t in tasks.tasks.values() if t.state != RUNNING]
    if restoring:
        return Verdict(False, "restoring", {"restoring_tasks": restoring})
    verdict = _stuck(worker)
    if verdict is not None:
        return verdict
    generation = committer.group.generation_id if committer.group else None
    details = {"generation": generation, "tasks": len(tasks.tasks)}
    return Verdict(True, None, details)


def liveness(worker: WorkerView) -> Verdict:
    """Alive, or failed/stopped, or wedged (see the module docstring)."""
    verdict = _failed_or_stopped(worker)
    if verdict is not None:
        return verdict
    if worker.started.is_set() and not worker.stop_requested and unreachable(worker) is None:
        stuck = _stuck(worker)
        bound = worker.conf.effective_liveness_timeout
        if stuck is not None and stuck.details["seconds"] >= bound:
            return Verdict(
                False,
                "wedged",
                {"cause": stuck.reason, "liveness_timeout": bound, **stuck.details},
            )
    return Verdict(True, None, {"app": worker.conf.id})


def seconds_since_commit(worker: WorkerView) -> dict[str, float]:
    """Per running task: 0 when nothing of it waits (caught up and committed), else seconds
    since a commit last carried its progress or found it current."""
    parts = worker.parts
    if parts is None:
        return {}
    tasks, consumer = parts.tasks, parts.consumer
    now = time.monotonic()
    committed_at = worker.metrics.committed_at
    out: dict[str, float] = {}
    for task in tasks.running():
        name = str(task.id)
        if not input_waiting(task, consumer):
            out[name] = 0.0
            continue
        since = committed_at.setdefault(name, now)  # new here: counts from now
        out[name] = round(max(0.0, now - since), 3)
    return out
