"""Written after faust-streaming's user guide, "Streams": take, enumerate, filter, echo,
through, group_by on a model field, events and event.message."""

import faust


class Order(faust.Record, serializer="json"):
    id: int
    account: str
    amount: float


app = faust.App("guide-streams", topic_partitions=4)
orders = app.topic("guide-orders", key_type=str, value_type=Order)
copies = app.topic("guide-orders-copy", key_type=str, value_type=Order)
big_echo = app.topic("guide-big", key_type=str, value_type=Order)
batches = app.topic("guide-batches", value_type=int)
per_account = app.Table("per-account", default=int)


@app.agent(orders)
async def batcher(stream):
    async for values in stream.take(10, within=2):
        assert 1 <= len(values) <= 10
        await batches.send(value=sum(o.id for o in values))


@app.agent(orders)
async def counter(stream):
    async for i, order in stream.enumerate(start=1):
        if i % 50 == 0:
            print(f"COUNTED {i}")


@app.agent(orders)
async def big(stream):
    async for order in stream.filter(lambda o: o.amount > 50).echo(big_echo):
        print(f"BIG {order.id} {order.amount}")


@app.agent(orders)
async def accounts(stream):
    async for order in stream.through(copies).group_by(Order.account):
        per_account[order.account] += 1


@app.agent(copies)
async def positions(stream):
    async for event in stream.events():
        assert event.message.topic == "guide-orders-copy"
        assert event.message.offset >= 0


if __name__ == "__main__":
    app.main()
