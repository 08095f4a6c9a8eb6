"""Studies of recipes (the transfer search): scripts run with `python -m experiments.NAME`, each writing
what docs/transfer.md cites."""
