"""Topologies written the way an app team writes them: ``streams-app -A topologies.<name> worker``."""
