import sys

from streams_app.chaos.cli import main

sys.exit(main())
