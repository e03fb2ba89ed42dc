"""Topologies written as an app team writes them.

Run one with ``streams-app -A topologies.<name> worker``.
"""
