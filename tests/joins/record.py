"""A recorded run of the join applications: input, outputs and what the checks found, as JSON.

``python -m tests.joins.record FILE`` checks a recorded Kafka Streams run again against the
oracle and models (:mod:`tests.joins.compare`) without a broker: for working on the models or
the definitions, and for reading what Kafka Streams did.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.joins.compare import KINDS, check
from tests.joins.data import Dataset, Params, Rec
from tests.joins.models import Row


def write_record(
    path: Path,
    data: Dataset,
    outputs: dict[str, list[Row]],
    partitions: dict[str, list[int]],
    report: dict[str, Any],
    *,
    seed: int,
    source: str,
) -> None:
    record = {
        "source": source,
        "seed": seed,
        "params": data.params.__dict__,
        "partitions": data.partitions,
        "made": dict(data.made),
        "report": report,
        "input": [[r.topic, r.partition, r.key, r.value, r.ts, r.offset] for r in data.records],
        "outputs": {
            kind: [[*row, part] for row, part in zip(rows, partitions[kind], strict=True)]
            for kind, rows in outputs.items()
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_lines(record))


def _lines(record: dict[str, Any]) -> str:
    """JSON with one input record or output row per line, so a recorded run reads and diffs."""
    dump = json.dumps
    head = {k: v for k, v in record.items() if k not in ("input", "outputs")}
    parts = ["{", *(f"{dump(k)}: {dump(v)}," for k, v in head.items()), '"input": [']
    parts.append(",\n".join(dump(row) for row in record["input"]))
    parts.append('],\n"outputs": {')
    kinds = []
    for kind, rows in record["outputs"].items():
        kinds.append(f"{dump(kind)}: [\n" + ",\n".join(dump(row) for row in rows) + "\n]")
    parts.append(",\n".join(kinds))
    parts.append("}}")
    return "\n".join(parts) + "\n"


def load_record(
    path: Path,
) -> tuple[Dataset, dict[str, list[Row]], dict[str, list[int]], dict[str, Any]]:
    """The input, the output rows and their partitions per join kind, and the whole record."""
    record = json.loads(path.read_text())
    data = Dataset(
        [Rec(*r) for r in record["input"]], record["partitions"], Params(**record["params"])
    )
    outputs = {kind: [Row(*row[:4]) for row in rows] for kind, rows in record["outputs"].items()}
    partitions = {kind: [row[4] for row in rows] for kind, rows in record["outputs"].items()}
    return data, outputs, partitions, record


def main(path: str) -> int:
    data, outputs, partitions, record = load_record(Path(path))
    print(f"{record['source']}, seed {record['seed']}, {len(data.records)} input records")
    failed = 0
    for kind in KINDS:
        try:
            outcome = check(kind, outputs[kind], data, reference=True, partitions=partitions[kind])
            print(outcome.line())
        except AssertionError as exc:
            failed += 1
            print(f"FAILED {exc}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
