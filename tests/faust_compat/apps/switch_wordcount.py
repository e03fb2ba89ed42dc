"""A Faust word count with a table and a group_by, as a team would run it on faust-streaming.

The in-place switch test runs this file under faust-streaming, stops it, and starts the very
same file under streams_app (only its import changed): streams_app must continue from Faust's
committed offsets and Faust's changelog state.
"""

import faust

app = faust.App("switch-wc", topic_partitions=4, store="rocksdb://")
sentences = app.topic("switch-sentences", value_type=str)
words = app.topic("switch-words", value_type=str)
counts = app.Table("word-counts", default=int)


@app.agent(sentences)
async def split(stream):
    async for sentence in stream:
        for word in sentence.split():
            await words.send(value=word)


@app.agent(words)
async def count(stream):
    async for word in stream.group_by(lambda w: w, name="word"):
        counts[word] += 1


if __name__ == "__main__":
    app.main()
