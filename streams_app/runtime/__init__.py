"""The runtime: worker, tasks, the commit protocol, rebalancing and the error policy."""
