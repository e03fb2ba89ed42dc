"""Provisioning: the admin calls around the pure planner, at a worker's start.

Ask the broker for the partition counts of the topics the description needs
(:func:`~streams_app.topology.plan.topics_to_look_up`), plan
(:func:`~streams_app.topology.plan.plan_topology`, which refuses what cannot work), then create
the topics the plan lists as missing. Nothing else talks to the broker about topics before the
worker consumes; nothing here decides anything.
"""

from __future__ import annotations

from streams_app.settings import Settings
from streams_app.topology.description import TopologyDescription
from streams_app.topology.plan import TopologyPlan, plan_topology, topics_to_look_up
from streams_app.transport.base import AdminClient


async def provision(
    description: TopologyDescription, admin: AdminClient, conf: Settings
) -> TopologyPlan:
    """The plan for ``description`` on ``admin``'s cluster, its missing topics created."""
    existing = await admin.partition_counts(topics_to_look_up(description, conf))
    plan = plan_topology(description, existing, conf)
    if plan.to_create:
        await admin.create_topics(plan.to_create)
    return plan
