"""Datacenter fabrics: switches and cables as data (``fabric``), read from ``cluster.topology``
(``spec``), and where flows go on them (``routing``: placement of nodes on host slots, ECMP and
deterministic routes). Nothing here imports the cluster, the engines or the cost layer."""
