"""The topology layer: what an app declares, how it is planned, and the contract it runs under.

It sits below both the app layer (which builds a description) and the runtime (which executes
one), and imports neither (``app -> topology <- runtime``):

- :mod:`~streams_app.topology.contract`: what topology code calls while it runs (the
  :class:`~streams_app.topology.contract.Runtime` protocol, events, send futures);
- :mod:`~streams_app.topology.description`: the immutable description of a topology
  (``App.describe()``), and its text and JSON forms;
- :mod:`~streams_app.topology.plan`: the pure planner, description + broker metadata -> plan;
- :mod:`~streams_app.topology.names`: Faust's names for what an app creates.

Nothing is imported here, so that importing one of them loads only what it needs.
"""
