"""The verifier: everything the topology committed, read ``read_committed``, against the input.

Modelled on ``EosTestDriver.verify`` of Kafka's streams EOS system test, extended with the checks
of the Jepsen Kafka checker and the design brief's invariants 1-10 (11 is the client-level
workload of :mod:`streams_app.chaos.copier`, 12 the fault log's resume times):

1. every partition of every topic is quiescent: last stable offset == high watermark;
2. the group's committed offsets on ``data`` and the repartition topic equal their end offsets;
3. ``echo[p]`` is ``data[p]`` below the committed offset, in order, each record once, nothing
   beyond; the same for the repartition topic (each input once, under its bucket key);
4. ``sum``/``min``/``cnt`` hold one record per processed input, each the running aggregate of its
   key over ``data[p][0..i]``; ``max`` one per processed repartition record, the running max of
   its bucket over ``repartition[p][0..i]``;
5. the changelogs, compacted, equal the final aggregates per key;
6. every offset the concurrent reader saw during the faults is a committed record at the end;
7. no (source partition, source offset) twice in any output (lineage headers);
8. for every processed input all five hop-1 outputs exist, for every unprocessed one none; every
   processed repartition record has its ``max``; every changelog value is a value the outputs
   show for that key, in the same order (the changelog committed with the outputs);
9. per input partition, the ``generation`` header never goes back in input order, and one
   generation's records come from one transactional id at a time: a zombie fenced by a newer
   generation got nothing committed. A static member restarted within its session timeout
   keeps the generation but, on a new state dir (``state_wipe``), has a new transactional id;
   that hand-over is one switch at one input offset, while a zombie of the same generation
   would show as ids taking turns (the 10M run's 24 "zombie commits" were such hand-overs);
10. every local store partition equals the committed changelog up to the store's changelog
    offset (faust keeps no consistent offset: its stores must hold only committed values).

Beside them (issue 38, what partitions add): every input the brokers acknowledged to the
generator is in the input topic, as sent (``lost_acked_inputs``, records).

With ``dead_letter_topic`` (the soak, :mod:`streams_app.chaos.soak`), ``data`` may also hold
poison records (a value that is not an integer): they have no outputs, and each one below the
committed offset must be in the dead-letter topic exactly once (7 when twice; 8 when missing, or
when a dead letter names a good record or an uncommitted one: a poison record's one output is
its dead letter).

Each check counts violations (records, keys or partitions, as stated in the examples) and keeps a
few examples. Outputs for inputs the group never committed are *extra*, not expected: a run that
could not drain is judged on what it committed, and the lag shows under invariant 2.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from streams_app.chaos import invariants as inv
from streams_app.chaos.generator import Acked
from streams_app.chaos.reader import partitions_of, scan
from streams_app.chaos.systems import StoreSnapshot, System
from streams_app.lineage import parse_lineage
from streams_app.readback import last_stable_equals_high_watermark

log = logging.getLogger(__name__)

EXAMPLES = 5


#: Bits of the hop-1 outputs of one input record (atomicity).
def _int_key(raw: bytes) -> int:
    """A key of the EOS test topology: its digits, raw or as a JSON value (tables and the
    repartition hop write keys as Faust does: table keys in JSON, a re-keyed record's key
    through the source topic's codec)."""
    try:
        return int(raw)
    except ValueError:
        return int(json.loads(raw))


BITS = {"echo": 1, "sum": 2, "min": 4, "cnt": 8, "repartition": 16}
ALL_HOP1 = 31


@dataclass
class Verification:
    violations: dict[str, int] = field(
        default_factory=lambda: {**dict.fromkeys(inv.INVARIANTS, 0), inv.LOST_ACKED: 0}
    )
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    stats: dict[str, Any] = field(default_factory=dict)

    def add(self, invariant: str, count: int = 1, example: str | None = None) -> None:
        if count <= 0:
            return
        self.violations[invariant] += count
        if example is not None and len(self.examples[invariant]) < EXAMPLES:
            self.examples[invariant].append(example)

    @property
    def total(self) -> int:
        return sum(self.violations.values())


def _headers(record: Any) -> dict[str, bytes]:
    return {k: v for k, v in record.headers}


class _Lineage:
    """Per output topic: where each record came from, and what that says."""

    def __init__(self, name: str, sizes: Mapping[int, int]) -> None:
        self.name = name
        self.seen = {p: bytearray(n) for p, n in sizes.items()}
        # For invariant 9: per source partition, (source offset, generation, txn id) in log order.
        self.src_offsets: dict[int, array[int]] = defaultdict(lambda: array("q"))
        self.generations: dict[int, array[int]] = defaultdict(lambda: array("q"))
        self.txn_ids: dict[int, array[int]] = defaultdict(lambda: array("q"))
        self.last: dict[tuple[int, int], int] = {}
        self.records = 0


class Verifier:
    def __init__(
        self,
        bootstrap: str,
        system: System,
        *,
        stores: Iterable[StoreSnapshot] = (),
        concurrent: Mapping[tuple[str, int], array[int]] | None = None,
        acked: Acked | None = None,
        quiescence_timeout: float = 60.0,
        dead_letter_topic: str | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.system = system
        self.topics = system.topics
        self.stores = list(stores)
        self.concurrent = concurrent
        self.acked = acked
        self.quiescence_timeout = quiescence_timeout
        self.dead_letter_topic = dead_letter_topic
        self.result = Verification()
        #: Input partition -> offsets of the poison records (values that are not integers).
        self.poison: dict[int, set[int]] = defaultdict(set)
        # filled while verifying
        self.committed: dict[tuple[str, int], int] = {}
        self.data_keys: dict[int, array[int]] = {}
        self.data_values: dict[int, array[int]] = {}
        self.expected: dict[str, dict[int, array[int]]] = {}
        self.key_positions: dict[int, tuple[int, array[int]]] = {}
        self.rep_offsets: dict[int, array[int]] = defaultdict(lambda: array("q"))
        self.rep_values: dict[int, array[int]] = defaultdict(lambda: array("q"))
        self.rep_mask: dict[int, bytearray] = {}
        self.exp_max: dict[int, array[int]] = {}
        self.bucket_positions: dict[int, tuple[int, array[int]]] = {}
        self.masks: dict[int, bytearray] = {}
        self.final_offsets: dict[tuple[str, int], array[int]] = defaultdict(lambda: array("q"))
        self._txn_id_index: dict[bytes, int] = {}

    # -- driver ------------------------------------------------------------------------------

    async def run(self) -> Verification:
        r = self.result
        await self._check_quiescence()
        await self._read_committed_offsets()
        await self._read_data()
        await self._check_hop1()
        self._compute_max()
        await self._check_max()
        self._check_atomicity()
        await self._check_changelogs()
        self._check_concurrent()
        await self._check_dead_letters()
        r.stats["violations"] = r.total
        return r

    def _c(self, topic: str, partition: int) -> int:
        return self.committed.get((topic, partition), 0)

    # -- 1 and 2 -----------------------------------------------------------------------------

    async def _check_quiescence(self) -> None:
        topics = [self.topics.data, *self.topics.outputs]
        if self.dead_letter_topic is not None:
            topics.append(self.dead_letter_topic)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.quiescence_timeout
        while True:
            open_ = await last_stable_equals_high_watermark(self.bootstrap, topics)
            if not open_ or loop.time() > deadline:
                break
            await asyncio.sleep(1.0)
        for tp, (lso, hw) in sorted(open_.items()):
            self.result.add(
                inv.OPEN_TRANSACTIONS,
                1,
                f"{tp.topic}[{tp.partition}]: last stable offset {lso} < high watermark {hw}",
            )

    async def _read_committed_offsets(self) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="chaos-verifier")
        consumer: Any = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, isolation_level="read_uncommitted"
        )
        await admin.start()
        await consumer.start()
        try:
            tps = await partitions_of(consumer, self.topics.inputs)
            ends = await consumer.end_offsets(tps)
            found = await admin.list_consumer_group_offsets(self.system.group_id, partitions=tps)
        finally:
            await consumer.stop()
            await admin.close()
        for tp in tps:
            meta = found.get(tp)
            committed = int(meta.offset) if meta is not None and meta.offset >= 0 else 0
            self.committed[(tp.topic, tp.partition)] = committed
            end = int(ends[tp])
            if committed != end:
                self.result.add(
                    inv.COMMITTED_OFFSETS,
                    1,
                    f"{tp.topic}[{tp.partition}]: committed {committed}, end {end}",
                )
        self.result.stats["committed_offsets"] = {
            f"{t}[{p}]": o for (t, p), o in sorted(self.committed.items())
        }

    # -- the input ---------------------------------------------------------------------------

    async def _read_data(self) -> None:
        keys: dict[int, array[int]] = defaultdict(lambda: array("q"))
        values: dict[int, array[int]] = defaultdict(lambda: array("q"))

        def on_record(record: Any) -> None:
            k, v = keys[record.partition], values[record.partition]
            while len(k) < record.offset:  # a gap (never expected in a plain topic)
                k.append(-1)
                v.append(-1)
            try:
                key, value = _int_key(record.key), int(record.value)
            except (TypeError, ValueError):
                if self.dead_letter_topic is None:
                    raise
                self.poison[record.partition].add(record.offset)
                key = value = -1  # no outputs expected: it goes to the dead-letter topic
            k.append(key)
            v.append(value)

        ends = await scan(self.bootstrap, [self.topics.data], on_record)
        for tp, end in ends.items():
            while len(keys[tp.partition]) < end:
                keys[tp.partition].append(-1)
                values[tp.partition].append(-1)
        self.data_keys, self.data_values = dict(keys), dict(values)
        records = sum(sum(1 for k in ks if k >= 0) for ks in keys.values())
        processed = sum(
            min(self._c(self.topics.data, p), len(ks)) for p, ks in self.data_keys.items()
        )
        self.result.stats["input_records"] = records
        self.result.stats["processed_inputs"] = processed
        self._check_acked()

        # Expected running aggregates per processed input, and where each key occurs.
        exp_sum: dict[int, array[int]] = {}
        exp_min: dict[int, array[int]] = {}
        exp_cnt: dict[int, array[int]] = {}
        positions: dict[int, tuple[int, array[int]]] = {}
        for p, ks in self.data_keys.items():
            vs = self.data_values[p]
            n = min(self._c(self.topics.data, p), len(ks))
            s, mn, c = array("q", bytes(8 * n)), array("q", bytes(8 * n)), array("q", bytes(8 * n))
            run_sum: dict[int, int] = {}
            run_min: dict[int, int] = {}
            run_cnt: dict[int, int] = {}
            for i in range(n):
                key = ks[i]
                if key < 0:
                    continue
                value = vs[i]
                s[i] = run_sum[key] = run_sum.get(key, 0) + value
                low = run_min.get(key)
                mn[i] = run_min[key] = value if low is None or value < low else low
                c[i] = run_cnt[key] = run_cnt.get(key, 0) + 1
                entry = positions.get(key)
                if entry is None:
                    entry = positions[key] = (p, array("q"))
                entry[1].append(i)
            exp_sum[p], exp_min[p], exp_cnt[p] = s, mn, c
        self.expected = {"sum": exp_sum, "min": exp_min, "cnt": exp_cnt}
        self.key_positions = positions
        self.masks = {p: bytearray(len(ks)) for p, ks in self.data_keys.items()}

    def _check_acked(self) -> None:
        """Every record the brokers acknowledged to the generator is in the topic, as sent."""
        acked = self.acked
        if acked is None:
            return
        lost = 0
        example = None
        for p, offsets in acked.offsets.items():
            ks, vs = self.data_keys.get(p, array("q")), self.data_values.get(p, array("q"))
            for i, offset in enumerate(offsets):
                if (
                    offset >= len(ks)
                    or ks[offset] != acked.keys[p][i]
                    or (vs[offset] != acked.values[p][i])
                ):
                    lost += 1
                    example = example or f"data[{p}]@{offset} acknowledged but not in the topic"
        self.result.stats["acked_inputs"] = len(acked)
        self.result.stats["acked_inputs_lost"] = lost
        self.result.add(inv.LOST_ACKED, lost, example)
        if lost:
            log.error("%d acknowledged input records are missing: %s", lost, example)

    # -- hop 1: echo, sum, min, cnt, repartition ---------------------------------------------

    def _txn_id(self, raw: bytes | None) -> int:
        if raw is None:
            return -1
        index = self._txn_id_index.get(raw)
        if index is None:
            index = self._txn_id_index[raw] = len(self._txn_id_index)
        return index

    async def _check_hop1(self) -> None:
        t = self.topics
        names = {t.echo: "echo", t.sum: "sum", t.min: "min", t.cnt: "cnt", t.repartition: "rep"}
        sizes = {p: len(ks) for p, ks in self.data_keys.items()}
        lineages = {topic: _Lineage(name, sizes) for topic, name in names.items()}
        data_topic = t.data
        keys, values, masks = self.data_keys, self.data_values, self.masks
        exp = self.expected
        r = self.result
        committed = {p: self._c(data_topic, p) for p in keys}
        final = self.final_offsets

        def check(record: Any, problems: list[str]) -> None:
            topic = record.topic
            lin = lineages[topic]
            name = lin.name
            final[(topic, record.partition)].append(record.offset)
            lin.records += 1
            h = _headers(record)
            where = f"{name}[{record.partition}]@{record.offset}"
            source = parse_lineage(record.headers)
            if source is None:
                problems.append(f"{where} has no lineage headers")
                return
            st, sp, so = source
            if (st or data_topic) != data_topic or sp not in keys:
                problems.append(f"{where} comes from {st!r}[{sp}]")
                return
            ks = keys[sp]
            if so >= len(ks) or ks[so] < 0:
                problems.append(f"{where} claims input {sp}@{so}, which does not exist")
                return
            seen = lin.seen[sp]
            if seen[so]:
                r.add(inv.DUPLICATES, 1, f"{where}: input {sp}@{so} appears again in {name}")
                problems.append(f"{where}: input {sp}@{so} repeated")
            if seen[so] < 255:
                seen[so] += 1
            masks[sp][so] |= BITS["repartition" if name == "rep" else name]
            lin.src_offsets[sp].append(so)
            lin.generations[sp].append(int(h.get("generation", b"-1")))
            lin.txn_ids[sp].append(self._txn_id(h.get("txn_id")))
            if so >= committed[sp]:
                problems.append(f"{where}: output for {sp}@{so}, beyond the committed offset")
                return
            # In order, per source partition, in the partition of the key (= the input's).
            last = lin.last.get((record.partition, sp), -1)
            if so <= last:
                problems.append(f"{where}: input {sp}@{so} after {sp}@{last}")
            lin.last[(record.partition, sp)] = so
            key = ks[so]
            if name == "rep":
                got_key, value = _int_key(record.key), int(record.value)
                want = values[sp][so]
                if value != want or got_key != want % 1000:
                    problems.append(f"{where}: ({got_key}, {value}) for input {sp}@{so}")
                self.rep_offsets[record.partition].append(record.offset)
                self.rep_values[record.partition].append(value)
                return
            if name != "echo" and record.partition != sp:
                problems.append(f"{where}: input {sp}@{so} in partition {record.partition}")
            got_key, got = _int_key(record.key), int(record.value)
            want = values[sp][so] if name == "echo" else exp[name][sp][so]
            if got_key != key or got != want:
                problems.append(f"{where}: ({got_key}, {got}), expected ({key}, {want})")
            if name == "echo" and record.partition != sp:
                problems.append(f"{where}: input {sp}@{so} echoed to partition {record.partition}")

        def on_record(record: Any) -> None:
            problems: list[str] = []
            try:
                check(record, problems)
            finally:
                if problems:  # one violation per output record, however many reasons
                    name = lineages[record.topic].name
                    r.add(inv.ECHO if name in ("echo", "rep") else inv.AGGREGATES, 1, problems[0])

        await scan(self.bootstrap, list(names), on_record)
        for topic, lin in lineages.items():
            invariant = inv.ECHO if lin.name in ("echo", "rep") else inv.AGGREGATES
            missing = 0
            example = None
            for p, seen in lin.seen.items():
                for so in range(committed[p]):
                    if not seen[so] and keys[p][so] >= 0:
                        missing += 1
                        example = example or f"{lin.name}: input {p}@{so} has no output"
            r.add(invariant, missing, example)
            self._check_generations(lin, topic)
            r.stats[f"{lin.name}_records"] = lin.records

    def _check_generations(self, lin: _Lineage, topic: str) -> None:
        """Invariant 9 for one output topic."""
        r = self.result
        for sp, offsets in lin.src_offsets.items():
            gens, tids = lin.generations[sp], lin.txn_ids[sp]
            order = sorted(range(len(offsets)), key=lambda i: (offsets[i], gens[i]))
            high = -1
            # Per generation, the transactional ids in input order, one entry per run.
            owners: dict[int, list[int]] = defaultdict(list)
            for i in order:
                gen = gens[i]
                if gen < high:
                    r.add(
                        inv.ZOMBIE_COMMITS,
                        1,
                        f"{lin.name}: input {sp}@{offsets[i]} committed under generation {gen} "
                        f"after generation {high}",
                    )
                high = max(high, gen)
                runs = owners[gen]
                if tids[i] >= 0 and (not runs or runs[-1] != tids[i]):
                    runs.append(tids[i])
            for gen, runs in owners.items():
                returns = len(runs) - len(set(runs))
                if returns:
                    r.add(
                        inv.ZOMBIE_COMMITS,
                        returns,
                        f"{lin.name}: input partition {sp} committed by {len(set(runs))} "
                        f"transactional ids taking turns in generation {gen} (one came back "
                        "after another took over)",
                    )
        # Free the memory of this topic's lineage.
        lin.src_offsets.clear()
        lin.generations.clear()
        lin.txn_ids.clear()

    # -- hop 2: max ----------------------------------------------------------------------------

    def _compute_max(self) -> None:
        rep = self.topics.repartition
        positions: dict[int, tuple[int, array[int]]] = {}
        for rp, offsets in self.rep_offsets.items():
            values = self.rep_values[rp]
            n = bisect.bisect_left(offsets, self._c(rep, rp))
            exp = array("q", bytes(8 * len(offsets)))
            running: dict[int, int] = {}
            for i in range(n):
                value = values[i]
                b = value % 1000
                high = running.get(b)
                exp[i] = running[b] = value if high is None or value > high else high
                entry = positions.get(b)
                if entry is None:
                    entry = positions[b] = (rp, array("q"))
                entry[1].append(i)
            self.exp_max[rp] = exp
            self.rep_mask[rp] = bytearray(len(offsets))
        self.bucket_positions = positions

    async def _check_max(self) -> None:
        t = self.topics
        r = self.result
        rep = t.repartition
        lin = _Lineage("max", {rp: len(o) for rp, o in self.rep_offsets.items()})
        final = self.final_offsets

        def check(record: Any, problems: list[str]) -> None:
            final[(record.topic, record.partition)].append(record.offset)
            lin.records += 1
            h = _headers(record)
            where = f"max[{record.partition}]@{record.offset}"
            source = parse_lineage(record.headers)
            if source is None:
                problems.append(f"{where} has no lineage headers")
                return
            rt, rp, ro = source
            offsets = self.rep_offsets.get(rp)
            i = bisect.bisect_left(offsets, ro) if offsets is not None else -1
            if rt != rep or offsets is None or i >= len(offsets) or offsets[i] != ro:
                problems.append(f"{where} claims {rt!r}[{rp}]@{ro}")
                return
            seen = lin.seen[rp]
            if seen[i]:
                r.add(inv.DUPLICATES, 1, f"{where}: repartition {rp}@{ro} appears again in max")
                problems.append(f"{where}: repartition {rp}@{ro} repeated")
            if seen[i] < 255:
                seen[i] += 1
            self.rep_mask[rp][i] = 1
            lin.src_offsets[rp].append(ro)
            lin.generations[rp].append(int(h.get("generation", b"-1")))
            lin.txn_ids[rp].append(self._txn_id(h.get("txn_id")))
            if ro >= self._c(rep, rp):
                problems.append(f"{where}: output for repartition {rp}@{ro}, uncommitted")
                return
            last = lin.last.get((record.partition, rp), -1)
            if ro <= last:
                problems.append(f"{where}: repartition {rp}@{ro} after {rp}@{last}")
            lin.last[(record.partition, rp)] = ro
            value = self.rep_values[rp][i]
            # The bucket key comes back from the repartition topic through the source's key
            # codec (as in Faust): an int, or its text when that codec is ``str``.
            got_key, got = _int_key(record.key), int(record.value)
            want = self.exp_max[rp][i]
            if got_key != value % 1000 or got != want:
                problems.append(
                    f"{where}: ({got_key}, {got}), expected ({value % 1000}, {want})",
                )

        def on_record(record: Any) -> None:
            problems: list[str] = []
            try:
                check(record, problems)
            finally:
                if problems:
                    r.add(inv.AGGREGATES, 1, problems[0])

        await scan(self.bootstrap, [t.max], on_record)
        missing = 0
        example = None
        for rp, offsets in self.rep_offsets.items():
            n = bisect.bisect_left(offsets, self._c(rep, rp))
            seen = lin.seen[rp]
            for i in range(n):
                if not seen[i]:
                    missing += 1
                    example = example or f"max: repartition {rp}@{offsets[i]} has no output"
        r.add(inv.AGGREGATES, missing, example)
        self._check_generations(lin, t.max)
        r.stats["max_records"] = lin.records

    # -- 8 -------------------------------------------------------------------------------------

    def _check_atomicity(self) -> None:
        r = self.result
        data = self.topics.data
        for p, mask in self.masks.items():
            committed = self._c(data, p)
            ks = self.data_keys[p]
            partial = 0
            example = None
            for o, bits in enumerate(mask):
                if ks[o] < 0:
                    continue
                if o < committed and bits != ALL_HOP1:
                    partial += 1
                    example = example or (
                        f"input {p}@{o} (committed) has outputs {_bits(bits)} of {_bits(ALL_HOP1)}"
                    )
                elif o >= committed and bits:
                    partial += 1
                    example = example or f"input {p}@{o} (not committed) has outputs {_bits(bits)}"
            r.add(inv.ATOMICITY, partial, example)
        rep = self.topics.repartition
        for rp, rmask in self.rep_mask.items():
            offsets = self.rep_offsets[rp]
            committed = self._c(rep, rp)
            bad = 0
            example = None
            for i, present in enumerate(rmask):
                if (offsets[i] < committed) != bool(present):
                    bad += 1
                    example = example or (
                        f"repartition {rp}@{offsets[i]} ({'' if offsets[i] < committed else 'un'}"
                        f"committed) {'has no' if not present else 'has a'} max"
                    )
            r.add(inv.ATOMICITY, bad, example)

    # -- 5, 8 (changelog), 10 ------------------------------------------------------------------

    async def _check_changelogs(self) -> None:
        r = self.result
        for table, topic in self.topics.changelogs.items():
            await self._check_changelog(table, topic)
        r.stats["store_partitions_checked"] = len(self.stores)

    async def _check_changelog(self, table: str, topic: str) -> None:
        r = self.result
        is_max = table == "max"
        positions = self.bucket_positions if is_max else self.key_positions
        expected = self.exp_max if is_max else self.expected[table]
        pointer: dict[int, int] = {}
        state: dict[int, dict[bytes, bytes]] = defaultdict(dict)
        # Invariant 10: store snapshots to compare, per partition, by changelog offset.
        checkpoints: dict[int, list[StoreSnapshot]] = defaultdict(list)
        loose: list[StoreSnapshot] = []
        for snap in self.stores:
            if snap.table != table:
                continue
            if snap.changelog_offset is None:
                loose.append(snap)
            else:
                checkpoints[snap.partition].append(snap)
        for snaps in checkpoints.values():
            snaps.sort(key=lambda s: s.changelog_offset or 0)
        ever: dict[bytes, set[bytes]] | None = defaultdict(set) if loose else None
        final = self.final_offsets
        records = 0

        def compare(snap: StoreSnapshot, partition_state: dict[bytes, bytes]) -> None:
            differing = {
                k
                for k in set(snap.items) | set(partition_state)
                if snap.items.get(k) != partition_state.get(k)
            }
            if differing:
                key = sorted(differing)[0]
                r.add(
                    inv.RESTORED_STATE,
                    len(differing),
                    f"{snap.worker} {table}[{snap.partition}] at changelog offset "
                    f"{snap.changelog_offset}: {len(differing)} keys differ from the committed "
                    f"changelog, e.g. {key!r}: store {snap.items.get(key)!r}, "
                    f"changelog {partition_state.get(key)!r}",
                )

        def on_record(record: Any) -> None:
            nonlocal records
            records += 1
            p = record.partition
            final[(topic, p)].append(record.offset)
            pending = checkpoints.get(p)
            while pending and (pending[0].changelog_offset or 0) <= record.offset:
                compare(pending.pop(0), state[p])
            if record.key is None:
                return
            if record.value is None:
                state[p].pop(record.key, None)
                return
            state[p][record.key] = record.value
            if ever is not None:
                ever[record.key].add(record.value)
            # Invariant 8: the value is one the outputs carry for this key, in order.
            key = _int_key(record.key)
            entry = positions.get(key)
            value = int(record.value)
            if entry is None:
                r.add(inv.ATOMICITY, 1, f"{table} changelog: key {key} never had an output")
                return
            src_p, idx = entry
            exp = expected[src_p]
            start = pointer.get(key, 0)
            j = start
            while j < len(idx) and exp[idx[j]] != value:
                j += 1
            if j == len(idx):
                r.add(
                    inv.ATOMICITY,
                    1,
                    f"{table} changelog[{p}]@{record.offset}: {key}={value} is not a committed "
                    "running value of the key (or out of order)",
                )
            else:
                pointer[key] = j

        ends = await scan(self.bootstrap, [topic], on_record)
        for p, pending in checkpoints.items():
            end = ends.get(TopicPartition(topic, p), 0)
            for snap in pending:
                if (snap.changelog_offset or 0) > end:
                    r.add(
                        inv.RESTORED_STATE,
                        1,
                        f"{snap.worker} {table}[{p}] is at changelog offset "
                        f"{snap.changelog_offset}, beyond the committed end {end}",
                    )
                compare(snap, state[p])
        for snap in loose:
            assert ever is not None
            uncommitted = [k for k, v in snap.items.items() if v not in ever.get(k, ())]
            if uncommitted:
                r.add(
                    inv.RESTORED_STATE,
                    len(uncommitted),
                    f"{snap.worker} {table}[{snap.partition}]: {len(uncommitted)} keys hold a "
                    f"value the changelog never committed, e.g. {uncommitted[0]!r}",
                )
        r.stats[f"{table}_changelog_records"] = records

        # Invariant 5: the compacted changelog equals the final aggregate of every key.
        got: dict[int, int] = {}
        for partition_state in state.values():
            for raw_key, raw_value in partition_state.items():
                got[_int_key(raw_key)] = int(raw_value)
        want: dict[int, int] = {}
        for key, (src_p, idx) in positions.items():
            if idx:
                want[key] = expected[src_p][idx[-1]]
        differing = [k for k in set(got) | set(want) if got.get(k) != want.get(k)]
        if differing:
            first = sorted(differing)[0]
            r.add(
                inv.FINAL_STATE,
                len(differing),
                f"{table}: {len(differing)} keys differ, e.g. {first}: table {got.get(first)}, "
                f"expected {want.get(first)}",
            )

    # -- 6 -------------------------------------------------------------------------------------

    async def _check_dead_letters(self) -> None:
        """Each poison record the group committed past is dead-lettered once; nothing else is."""
        topic = self.dead_letter_topic
        if topic is None:
            return
        r = self.result
        data = self.topics.data
        seen: dict[tuple[int, int], int] = defaultdict(int)

        def on_record(record: Any) -> None:
            h = _headers(record)
            where = f"{topic}[{record.partition}]@{record.offset}"
            try:
                source = (int(h["dlq.source.partition"]), int(h["dlq.source.offset"]))
            except (KeyError, ValueError):
                r.add(inv.ATOMICITY, 1, f"{where} has no dead-letter source headers")
                return
            if h.get("dlq.source.topic") != data.encode():
                r.add(inv.ATOMICITY, 1, f"{where} comes from {h.get('dlq.source.topic')!r}")
                return
            seen[source] += 1
            p, o = source
            if seen[source] == 2:
                r.add(inv.DUPLICATES, 1, f"{where}: input {p}@{o} dead-lettered again")
            if o not in self.poison.get(p, ()):
                r.add(inv.ATOMICITY, 1, f"{where}: dead letter for input {p}@{o}, a good record")
            elif o >= self._c(data, p):
                r.add(inv.ATOMICITY, 1, f"{where}: dead letter for {p}@{o}, not committed past")

        await scan(self.bootstrap, [topic], on_record)
        missing = 0
        example = None
        for p, offsets in self.poison.items():
            for o in offsets:
                if o < self._c(data, p) and not seen.get((p, o)):
                    missing += 1
                    example = example or f"poison input {p}@{o} committed past, not dead-lettered"
        r.add(inv.ATOMICITY, missing, example)
        r.stats["poison_inputs"] = sum(len(o) for o in self.poison.values())
        r.stats["dead_letters"] = sum(seen.values())

    def _check_concurrent(self) -> None:
        if self.concurrent is None:
            return
        r = self.result
        seen_total = 0
        for tp, offsets in self.concurrent.items():
            committed = self.final_offsets.get(tp, array("q"))
            bad = 0
            example = None
            for offset in set(offsets):
                seen_total += 1
                i = bisect.bisect_left(committed, offset)
                if i >= len(committed) or committed[i] != offset:
                    bad += 1
                    example = example or (
                        f"{tp[0]}[{tp[1]}]@{offset} was read during the run but is not committed"
                    )
            r.add(inv.ABORTED_READS, bad, example)
        r.stats["concurrent_reader_offsets"] = seen_total


def _bits(bits: int) -> str:
    return "{" + ",".join(name for name, bit in BITS.items() if bits & bit) + "}"


VerifyFn = Callable[[], Verification]
