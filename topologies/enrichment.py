"""Orders enriched with their customers: a table built from a topic and joins on it.

    streams-app -A topologies.enrichment worker

- ``customers`` is built from the compacted topic ``enrichment-customers`` (Kafka Streams'
  ``builder.table``): the latest value per customer id, a tombstone deleting the customer. Its
  changelog is that topic itself: nothing is copied, and a restart restores it from there up
  to the offset the worker committed.
- Each order (keyed by its customer id) is joined with its customer as the table is at the
  order's time (a stream-table left join: an order of an unknown customer goes out with
  ``customer: null``); the result keeps the order's key and timestamp and goes to
  ``enrichment-orders-enriched`` in the worker's transaction, with no agent in between.
- An agent reads the same joined stream and keeps the revenue per customer tier.
- ``accounts`` (built from ``enrichment-accounts``, keyed by customer id too) joined with
  ``customers`` is a table-table join: ``customer-accounts`` follows both tables' updates, and
  its changes go to ``enrichment-customer-accounts``.
- ``order-states`` (built from ``enrichment-order-states``, keyed by order id, each naming its
  customer) joined with ``customers`` by that foreign key (KIP-213): each order's state with its
  customer, kept up to date when either changes, to ``enrichment-order-view``.

Exactly once like everything else: join results, table state and input offsets commit in one
Kafka transaction (docs/joins.md).
"""

from __future__ import annotations

from typing import Any

from streams_app import App

app = App("enrichment", topic_partitions=4)

COMPACTED = {"cleanup.policy": "compact"}
customer_updates = app.topic(
    "enrichment-customers", key_type=str, value_type=dict, config=COMPACTED
)
account_updates = app.topic("enrichment-accounts", key_type=str, value_type=dict, config=COMPACTED)
orders = app.topic("enrichment-orders", key_type=str, value_type=dict)
order_state_updates = app.topic(
    "enrichment-order-states", key_type=str, value_type=dict, config=COMPACTED
)
order_view_topic = app.topic("enrichment-order-view", key_type=str, value_type=dict)
enriched_orders = app.topic("enrichment-orders-enriched", key_type=str, value_type=dict)
customer_accounts_topic = app.topic("enrichment-customer-accounts", key_type=str, value_type=dict)

customers = app.Table("customers", source=customer_updates)
accounts = app.Table("accounts", source=account_updates)
revenue = app.Table("revenue-per-tier", default=int, key_type=str, value_type=int)


def enrich(order: dict[str, Any], customer: dict[str, Any] | None) -> dict[str, Any]:
    return {**order, "customer": customer}


enriched = orders.left_join(customers, joiner=enrich)
enriched.to(enriched_orders)


def with_account(customer: dict[str, Any], account: dict[str, Any]) -> dict[str, Any]:
    return {**customer, "account": account}


customer_accounts = customers.join(accounts, joiner=with_account)
customer_accounts.to(customer_accounts_topic)

order_states = app.Table("order-states", source=order_state_updates)


def customer_of(order_state: dict[str, Any]) -> str | None:
    return order_state.get("customer")


def with_customer(order_state: dict[str, Any], customer: dict[str, Any] | None) -> dict[str, Any]:
    return {**order_state, "customer": customer}


order_view = order_states.left_join(
    customers, joiner=with_customer, foreign_key=customer_of, name="order-view"
)
order_view.to(order_view_topic)


@app.agent(enriched)
async def tally(stream):  # type: ignore[no-untyped-def]
    async for order in stream:
        customer = order["customer"] or {}
        revenue[customer.get("tier", "unknown")] += int(order.get("amount", 0))
