"""``streams-app -A module topology [--json] [--check]``: the app's topology, described and planned.

Without ``--check`` no broker is asked: the plan is the one a worker would make on a cluster
where none of the app's topics exist yet (declared partition counts, else ``topic_partitions``).
With it, the app's broker (or ``--bootstrap``) says which topics exist and with how many
partitions, and the plan is the one a worker starting now would make (nothing is created).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Mapping

from streams_app.cli.connect import add_bootstrap_option, settings_for
from streams_app.cli.loader import load_app
from streams_app.errors import TopologyError
from streams_app.settings import Settings
from streams_app.topology.description import TopologyDescription
from streams_app.topology.plan import TopologyPlan, plan_topology, topics_to_look_up
from streams_app.topology.render import format_topology

#: What an offline plan says it was planned on.
NO_BROKER = "a cluster without any of these topics (no broker asked; --check asks one)"


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = sub.add_parser(
        "topology",
        parents=parents,
        help="describe the app's topology: sources, agents, tables, internal topics, tasks (-A)",
    )
    parser.add_argument("--json", action="store_true", help="the description and plan as JSON")
    parser.add_argument(
        "--check",
        action="store_true",
        help="plan against the topics that exist on the broker (creates nothing)",
    )
    add_bootstrap_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    target = getattr(args, "streams_app_target", None)
    app = target if target is not None else load_app(args.app)
    description = app.describe()
    conf: Settings = app.conf
    existing: Mapping[str, int] = {}
    planned_on = NO_BROKER
    if args.check:
        if target is None:
            conf = settings_for(args)
        existing = asyncio.run(_existing(description, conf))
        planned_on = f"{conf.bootstrap_servers} ({len(existing)} of its topics exist)"
    plan: TopologyPlan | None = None
    refused: str | None = None
    try:
        plan = plan_topology(description, existing, conf)
    except TopologyError as exc:
        refused = str(exc)
    if args.json:
        out = {
            "description": description.to_dict(),
            "planned_on": "broker" if args.check else "no-broker",
            "plan": None if plan is None else plan.to_dict(),
            "refused": refused,
        }
        print(json.dumps(out, indent=2, sort_keys=True))
    else:
        print(format_topology(description, plan, planned_on=planned_on, refused=refused))
    return 0 if plan is not None else 2


async def _existing(description: TopologyDescription, conf: Settings) -> dict[str, int]:
    from streams_app.transport.kafka import KafkaTransport

    transport = KafkaTransport(
        conf.bootstrap_servers, security=conf.security(), principal=conf.principal
    )
    admin = transport.admin()
    await admin.start()  # raises BrokerUnavailable naming the address
    try:
        return await admin.partition_counts(topics_to_look_up(description, conf))
    finally:
        await admin.close()
