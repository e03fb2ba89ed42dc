"""``python -m streams_app.chaos``: the exactly-once chaos suite (``make chaos``).

Starts a real 3-broker Kafka cluster (replication 3, ``min.insync.replicas=2``), runs the EOS test
topology on streams_app and on faust-streaming through the same generator, fault schedule and
verifier, runs the client-level transaction check, prints the summary table and writes
``chaos-results.json``. Exits 1 if streams_app violated any invariant (faust's row is reported,
not judged).

    python -m streams_app.chaos --records 1000000 --faults 30 --seed 42
    python -m streams_app.chaos --records 50000 --duration 90 --faults 6 --systems streams_app
    python -m streams_app.chaos --network --standbys 1 --static-membership   # + network faults

``--network`` runs the networked mode: every broker, worker and the generator in a network
namespace of its own on one private bridge (needs root; ``streams_app.broker.netns``), and adds
the network fault kinds to the mix.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from streams_app.broker import EmbeddedKafka
from streams_app.broker.netns import Network, NetworkUnavailable, require_namespaces
from streams_app.chaos.config import ChaosConfig
from streams_app.chaos.report import (
    examples_text,
    fault_timeline,
    liveness_table,
    summary_table,
    write_results,
)
from streams_app.chaos.run import run_chaos
from streams_app.chaos.schedule import (
    DEFAULT_MIX,
    DESCRIPTIONS,
    KINDS,
    NETWORK_MIX,
    build_schedule,
    parse_mix,
)
from streams_app.chaos.systems import FAUST, STREAMS_APP

log = logging.getLogger("streams_app.chaos")


def build_parser() -> argparse.ArgumentParser:
    d = ChaosConfig()
    p = argparse.ArgumentParser(
        prog="python -m streams_app.chaos",
        description="Prove exactly-once under faults: generator, faults, verifier (12 invariants).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="fault kinds: " + "; ".join(f"{k}: {DESCRIPTIONS[k]}" for k in KINDS),
    )
    size = p.add_argument_group("size")
    size.add_argument("--records", type=int, default=d.records, help="input records (streams_app)")
    size.add_argument(
        "--duration", type=float, default=d.duration, help="seconds the records are spread over"
    )
    size.add_argument("--faults", type=int, default=d.faults, help="faults per system")
    size.add_argument("--seed", type=int, default=None, help="replay a run (default: random)")
    size.add_argument(
        "--mix",
        default=None,
        help="fault kinds and weights, e.g. 'sigkill=3,zombie=2,broker_kill' (default: "
        + ",".join(f"{k}={v:g}" for k, v in DEFAULT_MIX.items())
        + "; with --network also each network kind at weight 1)",
    )
    size.add_argument(
        "--min-per-kind",
        type=int,
        default=d.min_per_kind,
        help="each kind of the mix at least this often (the rest drawn by weight)",
    )
    size.add_argument(
        "--back-to-back",
        action="store_true",
        help=(
            "every fault as soon as the one before has recovered, and the rest of the input "
            "at once after the last (short runs: --duration is then an upper bound)"
        ),
    )
    size.add_argument(
        "--max-network-down",
        type=float,
        default=None,
        help="hold no network fault longer (past the session timeout where the kind says so)",
    )
    size.add_argument(
        "--network",
        action="store_true",
        help="networked mode: each broker, worker and the generator in its own network "
        "namespace (needs root), and the network fault kinds in the default mix",
    )
    size.add_argument("--keys", type=int, default=d.keys, help="distinct input keys")
    size.add_argument("--workers", type=int, default=d.workers, help="worker processes")
    size.add_argument("--partitions", type=int, default=d.partitions, help="input partitions")
    systems = p.add_argument_group("systems")
    systems.add_argument(
        "--systems",
        default=",".join(d.systems),
        help=f"comma-separated: {STREAMS_APP}, {FAUST}",
    )
    systems.add_argument("--faust-records", type=int, default=d.faust_records)
    systems.add_argument("--faust-duration", type=float, default=None, help="default: --duration")
    systems.add_argument("--faust-faults", type=int, default=None, help="default: --faults")
    systems.add_argument(
        "--faust-time-limit",
        type=float,
        default=d.faust_time_limit,
        help="hard limit on faust's whole run (a hung faust cannot hang the suite)",
    )
    timing = p.add_argument_group("timeouts")
    timing.add_argument("--session-timeout", type=float, default=d.session_timeout)
    timing.add_argument("--heartbeat-interval", type=float, default=d.heartbeat_interval)
    timing.add_argument("--transaction-timeout", type=float, default=d.transaction_timeout)
    timing.add_argument(
        "--commit-interval", type=float, default=None, help="default: the product's (0.1 s)"
    )
    timing.add_argument("--liveness-grace", type=float, default=d.liveness_grace)
    workers = p.add_argument_group("workers")
    workers.add_argument(
        "--standbys", type=int, default=d.standby_replicas, help="standby replicas per task"
    )
    workers.add_argument(
        "--static-membership",
        action="store_true",
        help="static group membership (group.instance.id worker-<i>)",
    )
    timing.add_argument("--drain-timeout", type=float, default=d.drain_timeout)
    client = p.add_argument_group("client-level check (invariant 11)")
    client.add_argument("--no-client-check", action="store_true")
    client.add_argument("--client-records", type=int, default=d.client_records)
    client.add_argument("--client-duration", type=float, default=d.client_duration)
    out = p.add_argument_group("output")
    out.add_argument("--no-concurrent-reader", action="store_true", help="skip invariant 6")
    out.add_argument("--output", type=Path, default=d.output, help="results JSON")
    out.add_argument("--workdir", type=Path, default=d.workdir, help="worker state and logs")
    out.add_argument("--keep", action="store_true", help="keep the workdir afterwards")
    out.add_argument(
        "--print-schedule", action="store_true", help="print the fault schedule and exit"
    )
    out.add_argument("-l", "--loglevel", default="info")
    return p


def config_from(args: argparse.Namespace) -> ChaosConfig:
    config = ChaosConfig(
        records=args.records,
        duration=args.duration,
        faults=args.faults,
        mix=parse_mix(args.mix)
        if args.mix
        else {**DEFAULT_MIX, **(NETWORK_MIX if args.network else {})},
        network=args.network,
        back_to_back=args.back_to_back,
        min_per_kind=args.min_per_kind,
        max_network_down=args.max_network_down,
        standby_replicas=args.standbys,
        static_membership=args.static_membership,
        systems=tuple(s.strip() for s in args.systems.split(",") if s.strip()),
        workers=args.workers,
        partitions=args.partitions,
        keys=args.keys,
        session_timeout=args.session_timeout,
        heartbeat_interval=args.heartbeat_interval,
        transaction_timeout=args.transaction_timeout,
        commit_interval=args.commit_interval,
        faust_records=args.faust_records,
        faust_duration=args.faust_duration,
        faust_faults=args.faust_faults,
        faust_time_limit=args.faust_time_limit,
        client_check=not args.no_client_check,
        client_records=args.client_records,
        client_duration=args.client_duration,
        concurrent_reader=not args.no_concurrent_reader,
        liveness_grace=args.liveness_grace,
        drain_timeout=args.drain_timeout,
        workdir=args.workdir,
        output=args.output,
    )
    if args.seed is not None:
        config.seed = args.seed
    config.validate()
    return config


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.loglevel).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    try:
        config = config_from(args)
    except ValueError as exc:
        print(f"chaos: error: {exc}", file=sys.stderr)
        return 2
    if args.print_schedule:
        for fault in build_schedule(
            seed=config.seed,
            faults=config.faults,
            duration=config.duration,
            mix=config.mix,
            workers=config.workers,
            brokers=3,
            session_timeout=config.session_timeout,
            transaction_timeout=config.transaction_timeout,
            back_to_back=config.back_to_back,
            max_down=config.max_network_down,
            min_per_kind=config.min_per_kind,
        ):
            print(fault.describe())
        return 0
    sizes = {
        STREAMS_APP: (config.records, config.faults, config.duration),
        FAUST: (
            config.faust_records,
            config.faults if config.faust_faults is None else config.faust_faults,
            config.faust_duration or config.duration,
        ),
    }
    plan = "; ".join(
        f"{name}: {sizes[name][0]:,} records, {sizes[name][1]} faults over {sizes[name][2]:g}s"
        for name in config.systems
    )
    if config.network:
        try:
            require_namespaces()
        except NetworkUnavailable as exc:
            print(f"chaos: error: {exc}", file=sys.stderr)
            return 2
    mode = "networked (a namespace per broker and worker)" if config.network else "loopback"
    print(f"chaos: seed {config.seed} (replay with --seed {config.seed}); {plan}; {mode}")
    print(
        f"chaos: standbys {config.standby_replicas}, static membership "
        f"{'on' if config.static_membership else 'off'}",
        flush=True,
    )
    started = time.monotonic()
    network = Network().create() if config.network else None
    try:
        cluster = EmbeddedKafka(3, network=network).start()
        try:
            results = asyncio.run(run_chaos(cluster, config, network))
        finally:
            cluster.stop()
            if not args.keep:
                shutil.rmtree(config.workdir, ignore_errors=True)
    finally:
        if network is not None:
            network.destroy()
    write_results(config.output, results, config)
    print()
    print(summary_table(results))
    liveness = liveness_table(results)
    if liveness:
        print()
        print(liveness)
    details = examples_text(results)
    if details:
        print()
        print(details)
    for name, result in results.items():
        if result.fault_log:
            print(f"\n{name} faults:\n{fault_timeline(result)}")
    print(
        f"\nchaos: {time.monotonic() - started:.0f}s, seed {config.seed}; results in "
        f"{config.output}",
        flush=True,
    )
    ours = results.get(STREAMS_APP)
    return 1 if ours is not None and ours.total_violations else 0
