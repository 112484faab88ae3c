"""`kubectl gpu`: the command-line view of the GPU scheduler (status, nodes, claims, strategy, watch, health)."""
