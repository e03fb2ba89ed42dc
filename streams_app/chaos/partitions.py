"""Network faults: which links each kind cuts, for how long, and what is checked after the heal.

The networked mode (:mod:`streams_app.broker.netns`) gives every broker (host ``b<id>``), every
worker (``w<index>``) and the generator (``gen``) an address of its own on one bridge; the
harness (progress monitor, coordinator lookups, concurrent reader, verifier) sits on the bridge
itself and is never cut, so it can watch what the cut does. A fault here is a set of one-way
blocks (a two-way cut is both directions) or a throttle, applied at once, held for the fault's
drawn duration (a flapping link: in phases) and removed at once. What each kind cuts is in
:mod:`streams_app.chaos.schedule`; the targets that depend on the cluster's state at the time
(coordinators, leaders) are looked up right before the strike, and the fault record names the
links that were cut.

After the heal, for every network fault:

- **liveness**: how long processing took to resume, measured from the strike and from the
  heal; kinds the group can route around (:data:`~streams_app.chaos.schedule.ROUTED_AROUND`)
  are judged from the strike, the others from the heal;
- **workers**: every worker process is processing again (a member of the group, found by its
  address, in a stable group) or has stopped with a clear message (a ``streams-app: error:``
  line or the worker's own "worker stopped" line), within the liveness bound;
- **hanging transactions**: once the heal is older than the transaction timeout plus the
  coordinator's abort sweep, the open transactions on the run's partitions are judged as
  ``streams-app txn hanging`` judges them (:func:`streams_app.ops.transactions.open_transactions`):
  a hanging or an overdue one is a violation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from streams_app.broker import EmbeddedKafka
from streams_app.broker.netns import Network
from streams_app.chaos import schedule as kinds
from streams_app.chaos.coordinators import CoordinatorLocator
from streams_app.chaos.leadership import leaders, move_leaders_off
from streams_app.chaos.schedule import Fault
from streams_app.chaos.systems import System, wait_transactional_id
from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.ops.dump import dump_partition
from streams_app.ops.transactions import (
    HANGING,
    OVERDUE,
    OVERDUE_GRACE_MS,
    PartitionTransaction,
    describe_transaction,
    open_transactions,
)
from streams_app.ops.txn_report import format_detail, format_dump, format_open
from streams_app.testing.workers import WorkerProcess

log = logging.getLogger(__name__)

#: The generator's host (it writes from a namespace of its own, a client like the workers).
GENERATOR_HOST = "gen"
#: Seconds the network must have been whole before the hanging check reads it (a broker that
#: was cut off catches up with the controller's metadata in about a second).
WHOLE_FOR = 3.0
#: The slow link's queue: what would wait longer is dropped.
SLOW_LINK_LATENCY_MS = 500
#: Lines that make a worker's exit a clear stop: the CLI's error line, or the worker's own
#: final line after a clean stop.
CLEAR_STOP = ("streams-app: error:", "worker stopped:")


def worker_host(index: int) -> str:
    return f"w{index}"


def worker_octet(index: int) -> int:
    return 31 + index


@dataclass
class Cut:
    """What one network fault does: one-way blocks, or a throttled host."""

    blocks: list[tuple[str, str]] = field(default_factory=list)
    throttle: str | None = None
    rate_kbit: int = 0
    description: str = ""

    def both(self, a: str, b: str) -> None:
        self.blocks += [(a, b), (b, a)]

    def apply(self, network: Network) -> None:
        for src, dst in self.blocks:
            network.block(src, dst)
        if self.throttle is not None:
            network.throttle(self.throttle, self.rate_kbit, SLOW_LINK_LATENCY_MS)

    def heal(self, network: Network) -> None:
        for src, dst in self.blocks:
            network.unblock(src, dst)
        if self.throttle is not None:
            network.unthrottle(self.throttle)


@dataclass
class HealReport:
    """What was found after one network fault healed."""

    #: Seconds from the heal until processing resumed (None: it did not, within the wait).
    resume_after_heal: float | None = None
    #: Workers neither processing nor stopped with a clear message, one line each.
    workers: list[str] = field(default_factory=list)
    #: Hanging or overdue transactions found once the heal was old enough, one line each
    #: (None: not checked yet, or the check could not run).
    hanging: list[str] | None = None


class NetworkFaults:
    """Plans, strikes and heals network faults on one run's network and cluster."""

    def __init__(
        self,
        network: Network,
        cluster: EmbeddedKafka,
        system: System,
        workers: Sequence[WorkerProcess],
        locator: CoordinatorLocator,
        *,
        bound: float,
    ) -> None:
        self.network = network
        self.cluster = cluster
        self.system = system
        self.workers = list(workers)
        self.locator = locator
        #: Seconds within which every worker must be back (or stopped clearly) after a heal.
        self.bound = bound
        self._sweeps: list[asyncio.Task[None]] = []
        self._admin: OpsAdmin | None = None
        #: Cuts applied so far (a flapping link counts each phase), whether one holds now, and
        #: since when the network is whole: the hanging check only trusts a whole network.
        self._strikes = 0
        self._cut_holds = False
        self._whole_since = time.monotonic()

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers

    @property
    def brokers(self) -> list[str]:
        return [EmbeddedKafka.host_name(n) for n in sorted(self.cluster.nodes)]

    async def admin(self) -> OpsAdmin:
        if self._admin is None:
            self._admin = await OpsAdmin(self.bootstrap).start()
        return self._admin

    async def close(self) -> None:
        for task in self._sweeps:
            task.cancel()
        for task in self._sweeps:
            with contextlib.suppress(BaseException):
                await task
        if self._admin is not None:
            with contextlib.suppress(Exception):
                await self._admin.close()
            self._admin = None

    async def wait_sweeps(self) -> None:
        """Let every pending hanging-transaction check finish."""
        for task in self._sweeps:
            with contextlib.suppress(Exception):
                await task

    # -- planning ----------------------------------------------------------------------------

    async def plan(self, fault: Fault) -> tuple[Cut, list[str]]:
        """The links ``fault`` cuts, looked up now; and notes on how they were chosen."""
        kind = fault.kind
        cut, notes = Cut(), []
        w = worker_host(fault.worker)
        brokers = self.brokers
        node = EmbeddedKafka.host_name(fault.node)
        if kind in (kinds.WORKER_CUT, kinds.WORKER_BLIP, kinds.FLAPPING_LINK):
            for b in brokers:
                cut.both(w, b)
            cut.description = f"worker {fault.worker} <-> every broker"
        elif kind == kinds.COORDINATORS_CUT:
            group = await self.locator.group_coordinator(self.system.group_id)
            tid = await wait_transactional_id(self.system, fault.worker)
            txn = await self.locator.transaction_coordinator(tid)
            coordinators = sorted({group, txn})
            moved, left = await move_leaders_off(
                self.bootstrap, self._app_topics(), coordinators, timeout=30.0
            )
            notes.append(
                f"group coordinator {group}, transaction coordinator {txn} ({tid}); "
                f"{moved} leaderships moved off them, {left} still on them"
            )
            for c in coordinators:
                cut.both(w, EmbeddedKafka.host_name(c))
            cut.description = f"worker {fault.worker} <-> coordinator broker(s) " + ",".join(
                map(str, coordinators)
            )
        elif kind == kinds.BROKER_ISOLATED:
            for b in brokers:
                if b != node:
                    cut.both(node, b)
            cut.description = f"broker {fault.node} <-> the other brokers"
        elif kind == kinds.BROKER_UNREACHABLE:
            # The generator (the test's driver) keeps writing, so that the stall shows.
            for i in range(len(self.workers)):
                cut.both(worker_host(i), node)
            cut.description = f"every worker <-> broker {fault.node}"
        elif kind == kinds.MARKERS_CUT:
            tid = await wait_transactional_id(self.system, fault.worker)
            txn = await self.locator.transaction_coordinator(tid)
            leader = await self._busiest_leader(exclude=txn, prefer=fault.node)
            cut.both(EmbeddedKafka.host_name(txn), EmbeddedKafka.host_name(leader))
            notes.append(f"transaction coordinator {txn} of {tid}; partition leader {leader}")
            cut.description = f"broker {txn} (transaction coordinator) <-> broker {leader}"
        elif kind == kinds.ONE_WAY_CUT:
            if fault.variant == 0:
                cut.blocks = [(w, b) for b in brokers]
                cut.description = f"worker {fault.worker} -> every broker (one way)"
            elif fault.variant == 1:
                cut.blocks = [(b, w) for b in brokers]
                cut.description = f"every broker -> worker {fault.worker} (one way)"
            else:
                ids = sorted(self.cluster.nodes)
                other = ids[(ids.index(fault.node) + 1) % len(ids)]
                cut.blocks = [(node, EmbeddedKafka.host_name(other))]
                cut.description = f"broker {fault.node} -> broker {other} (one way)"
        elif kind == kinds.SLOW_LINK:
            cut.throttle = w
            cut.rate_kbit = kinds.SLOW_LINK_RATES[fault.variant]
            cut.description = (
                f"worker {fault.worker}'s link at {cut.rate_kbit} kbit/s, "
                f"{SLOW_LINK_LATENCY_MS} ms queue"
            )
        else:
            raise ValueError(f"{kind} is not a network fault")
        return cut, notes

    def _app_topics(self) -> list[str]:
        topics = self.system.topics
        return sorted({*topics.external, *topics.outputs, topics.repartition})

    async def _busiest_leader(self, *, exclude: int, prefer: int) -> int:
        """A broker other than ``exclude`` leading partitions of the app's outputs: ``prefer``
        if it leads any, else the one that leads most."""
        counts = dict.fromkeys((n for n in self.cluster.nodes if n != exclude), 0)
        for leader in (await leaders(self.bootstrap, self.system.topics.outputs)).values():
            if leader in counts:
                counts[leader] += 1
        if counts.get(prefer, 0) > 0:
            return prefer
        return max(counts, key=lambda n: counts[n])

    # -- strike and heal ---------------------------------------------------------------------

    async def hold(self, fault: Fault, cut: Cut) -> float:
        """Apply ``cut``, hold it for the fault's duration (a flapping link: in phases), heal.

        Returns the monotonic time of the heal. The cut is healed whatever happens.
        """
        try:
            if fault.kind == kinds.FLAPPING_LINK:
                for is_cut, seconds in kinds.flapping_pattern(fault):
                    if is_cut:
                        self._apply(cut)
                    else:
                        self._heal(cut)
                    await asyncio.sleep(seconds)  # the drawn pattern's timing
            else:
                self._apply(cut)
                await asyncio.sleep(fault.down)  # the drawn duration of the cut
        finally:
            self._heal(cut)
        return time.monotonic()

    def _apply(self, cut: Cut) -> None:
        self._strikes += 1
        self._cut_holds = True
        cut.apply(self.network)

    def _heal(self, cut: Cut) -> None:
        cut.heal(self.network)
        if self._cut_holds:
            self._cut_holds = False
            self._whole_since = time.monotonic()

    # -- after the heal ----------------------------------------------------------------------

    async def check_workers(self, healed: float) -> list[str]:
        """Every worker processing (a member of a stable group) or stopped with a clear message,
        within the bound after the heal; the ones that are neither, one line each."""
        deadline = healed + self.bound
        while True:
            problems = await self._worker_problems()
            if not problems or time.monotonic() > deadline:
                return problems
            await asyncio.sleep(0.5)  # polling the group's membership; no event to await

    async def _worker_problems(self) -> list[str]:
        try:
            group = await (await self.admin()).describe_group(self.system.group_id)
        except Exception as exc:
            return [f"the group could not be described: {exc!r}"]
        members = {m.host.lstrip("/"): m for m in group.members}
        problems = []
        for index, worker in enumerate(self.workers):
            if worker.running:
                address = self.network.host(worker_host(index)).address
                member = members.get(address)
                # Its assignment may hold no partition: with standbys, a worker that lost its
                # state keeps only standby and warm-up tasks until it has caught up (tasks move
                # to it at a probing rebalance, as in Kafka Streams), and those are not
                # partitions of the group.
                if member is None:
                    problems.append(f"worker {index} runs but is not in the group ({group.state})")
                elif group.state != "Stable":
                    problems.append(f"the group is {group.state}")
            elif worker.process is not None:
                tail = worker.tail(30)
                if not any(line in tail for line in CLEAR_STOP):
                    last = tail.strip().splitlines()[-1:] or ["(no output)"]
                    problems.append(
                        f"worker {index} exited ({worker.returncode}) without a clear message; "
                        f"its last line: {last[0][:200]}"
                    )
        return problems

    def sweep_later(
        self, healed: float, transaction_timeout: float, report: HealReport, label: str
    ) -> None:
        """Check for hanging transactions once the heal is old enough that any transaction
        still open from before it is either ended by its coordinator or overdue."""
        settle = transaction_timeout + OVERDUE_GRACE_MS / 1000 + 1.0

        async def sweep() -> None:
            await asyncio.sleep(max(0.0, healed + settle - time.monotonic()))
            report.hanging = await self.hanging_while_whole(label)

        self._sweeps.append(asyncio.create_task(sweep(), name="chaos-hanging-sweep"))

    async def hanging_while_whole(self, label: str) -> list[str] | None:
        """:meth:`hanging`, read while no cut holds (and none has for :data:`WHOLE_FOR`
        seconds); read again if a cut struck meanwhile.

        During a partition the answer cannot be trusted: a broker cut off from the active
        controller has lost its leaderships without knowing it, and answers DescribeProducers
        with the producer state of partitions it no longer leads (a transaction whose marker
        the new leader already has, shown open). The next fault may already hold when this
        fault's check is due, so the check waits for the network to be whole again.
        """
        while True:
            while self._cut_holds or time.monotonic() - self._whole_since < WHOLE_FOR:
                await asyncio.sleep(0.1)  # the injector's cuts come and go; no event to await
            strikes = self._strikes
            found = await self.hanging(label)
            if strikes == self._strikes and not self._cut_holds:
                return found

    async def hanging(self, label: str = "end", attempts: int = 3) -> list[str] | None:
        """Hanging and overdue transactions on the run's partitions, as ``streams-app txn
        hanging`` judges them; None if the check failed ``attempts`` times (a broker down).
        What is found is described in ``hanging-<label>.txt`` of the run's directory."""
        for attempt in range(attempts):
            try:
                admin = await self.admin()
                found = await open_transactions(admin, topics=self._app_topics())
            except Exception as exc:
                log.info("hanging-transaction check failed (attempt %d): %r", attempt + 1, exc)
                await asyncio.sleep(2.0)
                continue
            bad = [t for t in found if t.verdict in (HANGING, OVERDUE)]
            if bad:
                await self._describe(label, found, bad)
            return [
                f"{t.topic}[{t.partition}] at {t.start_offset}: {t.verdict}, {t.reason}"
                for t in bad
            ]
        return None

    async def _describe(
        self, label: str, found: list[PartitionTransaction], bad: list[PartitionTransaction]
    ) -> None:
        """Write what an operator would look at: the open transactions, the coordinator's
        history of each id involved, and the partitions' batches around each start offset."""
        admin = await self.admin()
        parts = [format_open(found)]
        for tid in sorted({t.transactional_id for t in bad if t.transactional_id}):
            with contextlib.suppress(Exception):
                parts.append(format_detail(await describe_transaction(admin, tid)))
        for t in bad[:3]:
            with contextlib.suppress(Exception):
                dump = await dump_partition(
                    admin, t.topic, t.partition, from_offset=max(0, t.start_offset - 3), count=12
                )
                parts.append(format_dump(dump))
        path = self.system.workdir / f"hanging-{label}.txt"
        path.write_text("\n\n".join(parts) + "\n")
        log.warning("hanging transactions after %s: see %s", label, path)
