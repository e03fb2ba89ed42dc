"""The ``streams-app`` command line."""
