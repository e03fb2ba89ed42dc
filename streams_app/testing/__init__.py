"""Testing support for app teams: pytest fixtures for a real broker, and the topology harness."""
