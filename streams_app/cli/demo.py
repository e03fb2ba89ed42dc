"""``streams-app demo``: the whole thing, end to end, on a real broker, in about a minute.

1. start the embedded Kafka broker (jars from Maven Central, cached);
2. start a worker process on ``topologies.orders`` (exactly-once v2);
3. feed restocks and orders;
4. wait until the group has committed both inputs, then read ``inventory``, ``notifications`` and
   the stock changelog back ``read_committed`` and check every order shows up exactly once, with
   the right stock;
5. stop the worker with SIGTERM (graceful: last commit, stores closed) and the broker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from streams_app.errors import StreamsAppError

ITEMS = ("apple", "banana", "cherry", "damson", "elder")


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = sub.add_parser(
        "demo", parents=parents, help="embedded broker + orders worker + data in/out"
    )
    parser.add_argument("--orders", type=int, default=2000, help="orders to send (default 2000)")
    parser.add_argument("--seed", type=int, default=7)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="streams-demo-") as tmp:
        return asyncio.run(_demo(Path(tmp), args.orders, args.seed))


def _say(message: str) -> None:
    print(message, flush=True)


async def _demo(tmp: Path, n_orders: int, seed: int) -> int:
    # Imported here, not at the top: see cli/broker.py.
    from streams_app.broker import EmbeddedKafka
    from streams_app.readback import group_lag, last_stable_equals_high_watermark, read_topics

    t0 = time.monotonic()
    _say("1. Starting the embedded Kafka broker (real Apache Kafka, KRaft, 127.0.0.1)...")
    kafka = EmbeddedKafka(1, root=tmp / "kafka")
    await asyncio.to_thread(kafka.start)
    _say(
        f"   Kafka {kafka.version} at {kafka.bootstrap_servers}, ready in "
        f"{kafka.ready_seconds:.1f}s"
    )
    worker: subprocess.Popen[bytes] | None = None
    try:
        _say("2. Starting a worker: streams-app -A topologies.orders worker (exactly_once_v2)...")
        env = dict(os.environ, STREAMS_APP_BROKER=kafka.bootstrap_servers)
        env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), env.get("PYTHONPATH", "")])
        log_path = tmp / "worker.log"
        with open(log_path, "wb") as log:
            worker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "streams_app",
                    "-A",
                    "topologies.orders",
                    "worker",
                    "-l",
                    "info",
                    "--state-dir",
                    str(tmp / "state"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        await _wait_for_line(log_path, "worker orders started", worker, timeout=60)
        _say(f"   worker pid {worker.pid} is consuming")

        from topologies.orders import app, orders, restocks
        from topologies.orders.models import Order

        app.conf.broker = kafka.bootstrap_servers
        rng = random.Random(seed)
        per_item = 2 * n_orders // len(ITEMS)  # about what the orders will take
        stock_in = {item: rng.randrange(per_item * 3 // 4, per_item * 5 // 4) for item in ITEMS}
        order_list = [
            Order(
                order_id=f"o-{i}",
                user=f"user-{rng.randrange(50)}",
                item=rng.choice(ITEMS),
                qty=rng.randrange(1, 4),
            )
            for i in range(n_orders)
        ]
        _say(f"3. Sending {len(ITEMS)} restocks and {n_orders} orders...")
        async with app.producer() as producer:
            for item, qty in stock_in.items():
                await producer.send(restocks, key=item, value=qty)
            await producer.flush()
            for order in order_list:
                await producer.send(orders, key=order.item, value=order)

        _say("4. Waiting until the group has committed every order and restock...")
        # Done means the group's committed offsets reached the end of both inputs; counting
        # output records would not do: restocks make none, and may be processed last.
        deadline = time.monotonic() + 120
        while lag := await group_lag(kafka.bootstrap_servers, app.conf.id, ["orders", "restocks"]):
            if time.monotonic() > deadline:
                _say(f"   still behind after 120s: {sum(lag.values())} records ({lag})")
                break
            await asyncio.sleep(0.25)
        # The committed offsets become visible when the transaction's marker reaches
        # __consumer_offsets; the markers of the output partitions are written by the same
        # coordinator but not atomically with it. Wait until no output partition has an open
        # transaction (last stable offset == high watermark), or a read_committed reader could
        # stop short of records whose transaction already committed.
        outputs = ["inventory", "notifications", "orders-stock-changelog"]
        while open_txns := await last_stable_equals_high_watermark(
            kafka.bootstrap_servers, outputs
        ):
            if time.monotonic() > deadline:
                _say(f"   transactions still open after 120s: {open_txns}")
                break
            await asyncio.sleep(0.1)
        _say("   reading inventory, notifications and the stock changelog back, read_committed...")
        results = await read_topics(kafka.bootstrap_servers, outputs)
        ok = _report(results, order_list, stock_in) and not lag and not open_txns

        _say("5. Stopping the worker (SIGTERM: finish the batch, commit, close the stores)...")
        worker.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(worker.wait, 60)
        _say(f"   worker exited with code {code}")
        if code != 0:
            _say((tmp / "worker.log").read_text()[-3000:])
            ok = False
        if not ok:
            kept = Path(".demo") / "worker.log"
            kept.parent.mkdir(exist_ok=True)
            shutil.copyfile(tmp / "worker.log", kept)
            _say(f"   the worker's log is kept in {kept}")
        _say(
            f"Done in {time.monotonic() - t0:.1f}s: "
            + ("every order counted exactly once." if ok else "MISMATCH (see above).")
        )
        return 0 if ok else 1
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
        await asyncio.to_thread(kafka.stop)


async def _wait_for_line(
    path: Path, text: str, proc: subprocess.Popen[bytes], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise StreamsAppError(
                f"the worker exited with code {proc.returncode}:\n"
                + path.read_text(errors="replace")[-3000:]
            )
        await asyncio.sleep(0.1)
    raise StreamsAppError(f"the worker did not start within {timeout:.0f}s; see {path}")


def _report(results: dict, order_list: list, stock_in: dict[str, int]) -> bool:  # type: ignore[type-arg]
    inventory = [json.loads(r.value) for r in results["inventory"]]
    notifications = [json.loads(r.value) for r in results["notifications"]]
    ordered = Counter()  # type: Counter[str]
    for order in order_list:
        ordered[order.item] += order.qty
    # The table's committed state: the latest changelog record per key.
    last_stock: dict[str, int] = {}
    for record in results["orders-stock-changelog"]:
        last_stock[json.loads(record.key)] = json.loads(record.value)  # JSON keys, as Faust
    ids = [r["order_id"] for r in inventory]
    _say("")
    _say(f"   {'item':<8} {'restocked':>9} {'ordered':>8} {'stock table':>12} {'expected':>9}")
    ok = True
    for item in ITEMS:
        expected = stock_in[item] - ordered[item]
        seen = last_stock.get(item)
        ok &= seen == expected
        _say(f"   {item:<8} {stock_in[item]:>9} {ordered[item]:>8} {seen!s:>12} {expected:>9}")
    duplicates = len(ids) - len(set(ids))
    missing = len({o.order_id for o in order_list} - set(ids))
    _say("")
    _say(
        f"   inventory records: {len(inventory)}  notifications: {len(notifications)}  "
        f"orders sent: {len(order_list)}  duplicates: {duplicates}  missing: {missing}"
    )
    ok &= duplicates == 0 and missing == 0 and len(notifications) == len(order_list)
    return ok
