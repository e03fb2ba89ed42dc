"""``streams-app -A MODULE topology``: the description and plan of an app, as text and as JSON.

Without ``--check`` the command asks no broker (the plan is the one for a cluster without the
app's topics); with it, the real broker says which topics exist, and the plan keeps their counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams_app.kafka.ops_admin import OpsAdmin
from tests.ops.support import REPO


def topology(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams_app", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )


def test_the_orders_topology_as_text() -> None:
    done = topology("-A", "topologies.orders", "topology")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Topology of app 'orders'"
    text = done.stdout
    assert "  Sub-topology: 0 (tasks 0_0..0_3: input topics with 4 partitions)" in lines
    # Each source, then what reads it.
    orders = lines.index("    Source: orders (key raw:str, value record:Order, stage 0)")
    assert lines[orders + 1] == "      --> agent topologies.orders.reserve (1 instance)"
    restocks = lines.index("    Source: restocks (key raw:str, value json:int, stage 0)")
    assert lines[restocks + 1] == "      --> agent topologies.orders.restock (1 instance)"
    assert "    Tables (a partition in each task): stock" in lines
    assert (
        "  stock: table; 4 partitions (derived); key json:str, value json:int; "
        "changelog orders-stock-changelog" in lines
    )
    assert "  inventory (key raw:str, value record:Reserved; 4 partitions)" in lines
    assert "  orders-stock-changelog: changelog of table stock, compacted; 4 partitions" in lines
    assert "  orders.dlq: dead letters of orders; 4 partitions" in lines
    assert "  restocks.dlq: dead letters of restocks; 4 partitions" in lines
    assert "no broker asked" in text


def test_the_orders_topology_as_json() -> None:
    done = topology("-A", "topologies.orders", "topology", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    description, plan = out["description"], out["plan"]
    assert out["planned_on"] == "no-broker" and out["refused"] is None
    assert description["app_id"] == "orders"
    assert [(a["name"], a["reads"]) for a in description["agents"]] == [
        ("topologies.orders.reserve", "orders"),
        ("topologies.orders.restock", "restocks"),
    ]
    assert [t["name"] for t in description["tables"]] == ["stock"]
    assert description["tables"][0]["partitions"] is None  # declared without: the plan says
    assert plan["task_groups"] == [
        {"group": 0, "partitions": 4, "topics": ["orders", "restocks"], "tables": ["stock"]}
    ]
    assert plan["table_partitions"] == {"stock": 4}
    assert plan["dead_letter_topics"] == {"orders": "orders.dlq", "restocks": "restocks.dlq"}
    created = {t["name"]: t for t in plan["to_create"]}
    assert set(created) == {
        "inventory",
        "notifications",
        "orders",
        "orders-stock-changelog",
        "orders.dlq",
        "restocks",
        "restocks.dlq",
    }
    assert created["orders-stock-changelog"]["config"] == {"cleanup.policy": "compact"}


def test_the_pageviews_topology_shows_its_repartition_topic_one_stage_on() -> None:
    done = topology("-A", "topologies.pageviews", "topology")
    assert done.returncode == 0, done.stderr
    repartition = "topologies.pageviews.per_page-pageviews-page_of-repartition"
    lines = done.stdout.splitlines()
    assert (
        f"      --> group_by page_of (agent topologies.pageviews.per_page) --> repartition "
        f"topic {repartition}" in lines
    )
    source = next(
        i for i, line in enumerate(lines) if line.startswith(f"    Source: {repartition}")
    )
    assert lines[source].endswith(", stage 1)")
    assert lines[source + 1] == "      --> agent topologies.pageviews.per_page (1 instance)"
    assert any(
        line.startswith("  views-per-minute: windowed table (tumbling 1m grace 10s")
        for line in lines
    )


@pytest.mark.kafka
async def test_check_plans_against_the_topics_on_the_broker(
    bootstrap_servers: str, unique: str
) -> None:
    """``--check``: an input topic that exists with 2 partitions makes a 2-partition task group
    and table, and only the missing topics are listed to create (none is created)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(f"ks-in-{unique}", 2, 1)])
    finally:
        await admin.close()
    env = {"STREAMS_APP_BROKER": bootstrap_servers, "TEST_SUFFIX": unique}
    done = topology("-A", "tests.runtime.apps.keyed_sum", "topology", "--check", "--json", env=env)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)["plan"]
    assert plan["partition_counts"][f"ks-in-{unique}"] == 2
    assert plan["table_partitions"] == {"sums": 2}
    assert plan["task_groups"][0]["partitions"] == 2
    created = {t["name"]: t["partitions"] for t in plan["to_create"]}
    assert f"ks-in-{unique}" not in created
    assert created[f"ks-in-{unique}.dlq"] == 2
    assert created[f"ks-{unique}-sums-changelog"] == 2
    async with OpsAdmin(bootstrap_servers) as ops:
        existing = set(await ops.list_topics())
    assert f"ks-{unique}-sums-changelog" not in existing  # planned, not created


@pytest.mark.parametrize("module", ["topologies.orders", "topologies.pageviews"])
def test_docs_architecture_shows_what_the_command_prints(module: str) -> None:
    """docs/architecture.md quotes the command's output: it stays what the command prints."""
    done = topology("-A", module, "topology")
    assert done.returncode == 0, done.stderr
    docs = (REPO / "docs" / "architecture.md").read_text()
    quoted = f"$ streams-app -A {module} topology\n{done.stdout.rstrip()}\n```"
    assert quoted in docs, f"update docs/architecture.md with:\n{done.stdout}"
