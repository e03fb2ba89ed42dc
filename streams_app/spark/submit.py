"""Entry script for ``spark-submit``: the orders pipeline on a Spark cluster.

    spark-submit --master spark://HOST:7077 \\
        --jars "$(streams-app pipeline jars)" \\
        streams_app/spark/submit.py --bootstrap KAFKA:9092 --home /shared/pipeline \\
        --postgres-dsn postgresql://USER@HOST:5432/DB

It takes the options of ``streams-app pipeline`` (see ``streams-app pipeline --help``). Under
``spark-submit`` the master, the driver's address and the jars come from the submit command
line; the driver (where ``foreachBatch`` writes to PostgreSQL) runs where spark-submit runs, in
client mode. docs/pipeline.md has the complete commands.
"""

from __future__ import annotations

import sys

from streams_app.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["pipeline", *sys.argv[1:]]))
