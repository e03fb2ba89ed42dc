"""Faust's quick start (its playbooks/quickstart: a raw topic and the agent reading it), with a
topic of ``str`` values in Faust's default JSON beside it, for ``send`` on the command line:

    faust -A cli_send send @greet "Hello Faust"
    faust -A cli_send send cli-greetings "Hello Kafka topic"

``stream_buffer_maxsize`` is a Faust setting without effect on streams_app (it says so, once).
"""

import faust

app = faust.App(
    "cli-send",
    value_serializer="raw",
    topic_partitions=1,
    stream_buffer_maxsize=1024,
)

greetings_topic = app.topic("cli-greetings")
words_topic = app.topic("cli-words", value_type=str, value_serializer="json")


@app.agent(greetings_topic)
async def greet(greetings):
    async for greeting in greetings:
        print(greeting)


@app.agent(words_topic)
async def word(words):
    async for text in words:
        print(f"WORD {text!r}")


if __name__ == "__main__":
    app.main()
