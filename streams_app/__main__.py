import sys

from streams_app.cli.main import main

sys.exit(main())
