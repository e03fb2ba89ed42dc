"""``stream.echo(topic)``: every value of the stream copied to another topic, as Faust's user
guide shows it. The echo test runs this file under faust-streaming and under streams_app."""

import faust

app = faust.App("echo-keys", topic_partitions=4)
source = app.topic("echo-keys-in", key_type=str, value_type=int)
copies = app.topic("echo-keys-out", key_type=str, value_type=int)


@app.agent(source)
async def relay(stream):
    async for _value in stream.echo(copies):
        pass


if __name__ == "__main__":
    app.main()
