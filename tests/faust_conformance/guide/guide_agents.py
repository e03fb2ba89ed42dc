"""Written after faust-streaming's user guide, "Agents": an agent answering with yield, cast,
ask, join, map, kvmap from a task, sinks (a topic, another agent, a callable), concurrency."""

import faust


class Add(faust.Record):
    a: int
    b: int


app = faust.App("guide-agents", topic_partitions=4)
sums = app.topic("guide-sums", value_type=int)
seen = []


@app.agent()
async def audit(stream):
    async for value in stream:
        print(f"AUDIT {value}")


@app.agent(sink=[sums, audit, seen.append], concurrency=2)
async def adder(stream):
    async for add in stream:
        yield add.a + add.b


@app.task
async def use_the_adder(app):
    await adder.cast(Add(a=2, b=2))
    print(f"ASK {await adder.ask(Add(a=1, b=2))}")
    print(f"JOIN {await adder.join([Add(a=i, b=i) for i in range(4)])}")
    mapped = sorted([x async for x in adder.map([Add(a=i, b=1) for i in range(3)])])
    print(f"MAP {mapped}")
    kvmapped = sorted([x async for x in adder.kvmap([("k", Add(a=5, b=5)), ("j", Add(a=1, b=0))])])
    print(f"KVMAP {kvmapped}")
    print("DONE")


if __name__ == "__main__":
    app.main()
