"""scalebench's real harness: the simulator's workloads and strategies run with torch.distributed.

Needs the optional extra: ``pip install -e '.[real]'`` (torch).
"""
