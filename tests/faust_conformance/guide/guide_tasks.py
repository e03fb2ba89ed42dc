"""Written after faust-streaming's user guide, "Tasks, Timers, Cron Jobs, Web Views, and CLI
Commands": a task taking the app, timers (one on the leader), a service, a command with
options and an argument, a rebalance signal, and a table drawn as a terminal table."""

import faust
from faust.cli import argument, option

app = faust.App("guide-tasks", topic_partitions=2)
greetings = app.topic("guide-greetings", key_type=str, value_type=str)
greeted = app.Table("greeted", default=int, help="greetings per name")


@app.agent(greetings)
async def greet(stream):
    async for name, greeting in stream.items():
        greeted[name] += 1
        print(f"{greeting}, {name}")


@app.task
async def on_start(app):
    print(f"TASK {app.conf.id}")


@app.timer(interval=0.5)
async def every_half_second():
    print("TIMER")


@app.timer(1.0, on_leader=True)
async def on_the_leader(app):
    print("LEADER TIMER")
    print(greeted.as_ansitable(key="name", value="count", sort=True))


@app.service
class Announcer(faust.Service):
    async def on_start(self) -> None:
        print("SERVICE STARTED")


@app.on_rebalance_complete.connect
async def rebalanced(sender, **kwargs):
    print("REBALANCED")


@app.command(
    argument("name"),
    option("--greeting", default="Hello", help="What to say."),
    option("--times", type=int, default=1),
)
async def hello(self, name, greeting, times):
    for _ in range(times):
        await greetings.send(key=name, value=greeting)
    self.say(f"sent {times}")


if __name__ == "__main__":
    app.main()
