"""The plan's old home: the planner is :mod:`streams_app.topology.plan` (pure, below the app
layer and the runtime) and its admin calls are :mod:`streams_app.runtime.provision`. Kept so
that imports of ``TopologyPlan`` and ``dead_letter_topic`` from here keep working."""

from streams_app.topology.plan import TopologyPlan, dead_letter_topic

__all__ = ["TopologyPlan", "dead_letter_topic"]
