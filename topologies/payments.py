"""Payments matched to their orders: a windowed stream-stream join (docs/joins.md).

    streams-app -A topologies.payments worker

- ``payments-orders`` and ``payments-payments`` are both keyed by order id (so co-partitioned:
  the same partition count, checked at start). A payment matches its order when the two are at
  most 10 minutes apart, either way (``JoinWindows(timedelta(minutes=10))``); records up to a
  minute late still count (``grace``).
- The join is an *outer* join: an order paid in time gives ``(order, payment)`` once, whichever
  came second; an order with no payment gives ``(order, None)``, and a payment with no order
  ``(None, payment)``, but only once its window (plus grace) has closed and only if it never
  matched (no spurious "unpaid" for an order whose payment was merely late, KAFKA-10847). The
  results go to ``payments-matched`` in the worker's transaction, no agent in between.
- Kafka Streams would close those windows only when newer records come: with ``idle_close``,
  once the inputs have been quiet for two minutes the join's stream time follows the wall
  clock, so the last unpaid order of a quiet evening still gets its alert (opt-in: records
  older than that are then late).
- An agent reads the same joined stream: unpaid orders to ``payments-unpaid`` (an alert), and
  a count per outcome in the ``payment-outcomes`` table (``streams-app -A topologies.payments
  tables payment-outcomes``).

Exactly once like everything else: the join's buffers, its unmatched records, its stream time,
the outputs and the input offsets commit in one Kafka transaction.
"""

from __future__ import annotations

from datetime import timedelta

from streams_app import App, JoinWindows

app = App("payments", topic_partitions=4)

orders = app.topic("payments-orders", key_type=str, value_type=dict)
payments = app.topic("payments-payments", key_type=str, value_type=dict)
matched_topic = app.topic("payments-matched", key_type=str, value_type=dict)
unpaid_topic = app.topic("payments-unpaid", key_type=str, value_type=dict)

outcomes = app.Table("payment-outcomes", default=int, key_type=str, value_type=int)


def outcome(order: dict | None, payment: dict | None) -> dict:
    """A join result as one record: the order, the payment, and what happened."""
    if order is None:
        status = "payment-without-order"
    elif payment is None:
        status = "unpaid"
    elif payment.get("amount") != order.get("amount"):
        status = "amount-mismatch"
    else:
        status = "paid"
    return {"status": status, "order": order, "payment": payment}


matched = orders.outer_join(
    payments,
    JoinWindows(timedelta(minutes=10), grace=timedelta(minutes=1)),
    joiner=outcome,
    idle_close=timedelta(minutes=2),
    name="order-payments",
)
matched.to(matched_topic)


@app.agent(matched)
async def follow_up(stream):  # type: ignore[no-untyped-def]
    async for order_id, result in stream.items():
        outcomes[result["status"]] += 1
        if result["status"] == "unpaid":
            await unpaid_topic.send(key=order_id, value=result["order"])
