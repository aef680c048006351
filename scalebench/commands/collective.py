"""scalebench collective: one collective on its own, predicted, in nccl-tests' table.

``scalebench collective --op allreduce --backend nccl --nodes 4 --gpus-per-node 8 --inter-link
ib_hdr -b 8 -e 1G -f 2`` prints, for every size from -b to -e (times -f), the predicted time,
algbw and busbw with the algorithm and protocol the library would run, in the columns of
``scalebench real --comm`` (sim/commtable.py), so a measured table and a predicted one diff line
by line; ``--format csv|json`` for machines.
"""

from __future__ import annotations

import argparse

OPS_HELP = "allreduce, reduce, broadcast, allgather, reduce_scatter, alltoall, sendrecv"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--op", default="allreduce", help=f"the collective: {OPS_HELP} (default allreduce)")
    parser.add_argument("--backend", help="collective library: nccl, gloo, mpi (default: nccl on GPUs, gloo on CPUs)")
    parser.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    parser.add_argument("--gpus-per-node", type=int, help="GPUs (ranks) per node (default: the GPU's usual node, "
                                                           "8 on a DGX; 8 for a GPU without one)")
    parser.add_argument("--gpu", default="v100", help="a GPU of the catalog (scalebench list gpus; default v100)")
    parser.add_argument("--intra-link", help="link inside a node (default: the GPU's usual node's, else nvlink2)")
    parser.add_argument("--inter-link", help="link between nodes (default: the GPU's usual node's, else ib_edr)")
    parser.add_argument("--nics-per-node", type=int, help="inter-node NICs per node (default: the GPU's usual node's "
                                                          "where the cluster keeps its link and GPU count, else 1)")
    parser.add_argument("--algo", help="force the algorithm as NCCL_ALGO does (nccl: ring, tree, nvls; mpi: ring, "
                                       "recursive_doubling, rabenseifner, binomial, pairwise)")
    parser.add_argument("--proto", help="force NCCL's protocol as NCCL_PROTO does: LL, LL128, Simple")
    parser.add_argument("--nccl-socket-nthreads", type=int, metavar="N",
                        help="NCCL over TCP: helper threads per connection, as NCCL_SOCKET_NTHREADS (1-16; default "
                             "NCCL's choice by NIC: AWS 2, GCP 4, else none, the GPU's proxy thread copies)")
    parser.add_argument("--nccl-nsocks-perthread", type=int, metavar="N",
                        help="NCCL over TCP: sockets per helper thread, as NCCL_NSOCKS_PERTHREAD (threads x sockets "
                             "<= 64; default NCCL's choice: AWS 8, else 1)")
    parser.add_argument("--nccl-version", metavar="X.Y",
                        help="the NCCL release whose tables and mechanisms run, as strategy.nccl_version (default: "
                             "the newest modelled; `scalebench list nccl` shows them)")
    parser.add_argument("--mpi-library", help="MPI implementation, as strategy.mpi_library: mpich-3 (default), "
                                              "openmpi-1.10")
    parser.add_argument("--mpi-gpu-buffers", help="how MPI reaches GPU buffers, as strategy.mpi_gpu_buffers: host_copy "
                                                  "(default), host_copy_pinned, cuda_aware")
    parser.add_argument("--host", help="the nodes' CPU side, a host of the catalog (default epyc_vm_2026)")
    parser.add_argument("-b", "--minbytes", default="8", help="smallest size, e.g. 8, 1K, 1M (default 8)")
    parser.add_argument("-e", "--maxbytes", default="256M", help="largest size (default 256M)")
    parser.add_argument("-f", "--stepfactor", type=int, default=2, help="size multiplication factor (default 2)")
    parser.add_argument("--idle-ms", type=float, default=0.0,
                        help="idle time before each call (a TCP connection idle past its RTO restarts slow start; "
                             "nccl-tests runs back to back: 0)")
    parser.add_argument("--catalog", help="YAML file of extra gpus/links (e.g. from scalebench calibrate "
                                          "--from-nccl-tests)")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table",
                        help="table (default: nccl-tests' columns), csv or json")


def run(args: argparse.Namespace) -> int:
    from scalebench.commands.common import format_rows, write_out
    from sim.catalog import builtin_catalog, load_catalog_file
    from sim.cluster import cluster_from_dict
    from sim.commtable import comm_table
    from sim.costs.backends import (
        BACKENDS,
        BUSBW_FACTOR,
        OPERATIONS,
        CommOptions,
        comm_cost,
        default_backend,
    )
    from sim.errors import ConfigError, require_choice, require_positive
    from sim.strategy import nccl_socket_fields
    from sim.units import parse_bytes

    op = require_choice("--op", args.op, OPERATIONS)
    catalog = load_catalog_file(args.catalog) if args.catalog else builtin_catalog()
    cluster_spec: dict = {"host": args.host} if args.host is not None else {}
    # what is not given comes from the GPU's usual node (sim.cluster.node_defaults), as in a config
    if args.gpus_per_node is not None:
        cluster_spec["gpus_per_node"] = require_positive("--gpus-per-node", args.gpus_per_node, integer=True)
    elif catalog.gpu(args.gpu, "--gpu").node is None:
        cluster_spec["gpus_per_node"] = 8  # this command's default before GPUs had nodes
    if args.nics_per_node is not None:
        cluster_spec["nics_per_node"] = require_positive("--nics-per-node", args.nics_per_node, integer=True)
    for key, value in (("intra_link", args.intra_link), ("inter_link", args.inter_link)):
        if value is not None:
            cluster_spec[key] = value
    cluster = cluster_from_dict({**cluster_spec, "nodes": require_positive("--nodes", args.nodes, integer=True),
                                 "gpu": args.gpu}, catalog, where="--cluster")
    if cluster.world_size < 2:
        raise ConfigError("--nodes x --gpus-per-node", cluster.world_size, "at least 2 ranks")
    backend = require_choice("--backend", args.backend, BACKENDS) if args.backend is not None else default_backend(cluster.gpu)
    library = BACKENDS[backend]
    if args.algo is not None:
        require_choice("--algo", args.algo, library.algorithms)
    if args.proto is not None:
        require_choice("--proto", args.proto, library.protocols or ("(none: only nccl has protocols)",))
    low, high = parse_bytes("--minbytes", args.minbytes), parse_bytes("--maxbytes", args.maxbytes)
    if high < low:
        raise ConfigError("--maxbytes", args.maxbytes, f"at least --minbytes ({low} B)")
    if high > cluster.gpu.memory_bytes:  # a buffer the device holds (1e300 bytes answered before)
        raise ConfigError("--maxbytes", args.maxbytes, f"at most the {cluster.gpu.memory_bytes / 2**30:g} GiB of "
                          f"a {cluster.gpu.name} (the buffer lives on the device)")
    factor = require_positive("--stepfactor", args.stepfactor, integer=True)
    if factor < 2:
        raise ConfigError("--stepfactor", factor, "an integer >= 2")
    idle_ms = float(require_positive("--idle-ms", args.idle_ms, allow_zero=True, maximum=3.6e6,
                                     why="an hour: past TCP's retransmission timeout every connection has restarted"))
    nthreads, nsocks = nccl_socket_fields(args.nccl_socket_nthreads, args.nccl_nsocks_perthread,
                                          ("--nccl-socket-nthreads", "--nccl-nsocks-perthread"))
    if (nthreads is not None or nsocks is not None) and backend != "nccl":
        raise ConfigError("--nccl-socket-nthreads" if nthreads is not None else "--nccl-nsocks-perthread",
                          nthreads if nthreads is not None else nsocks, "only with --backend nccl")
    from sim.config import check_library_settings
    from sim.strategy import Strategy, library_fields

    flags = {"nccl_version": "--nccl-version", "mpi_library": "--mpi-library", "mpi_gpu_buffers": "--mpi-gpu-buffers",
             "nccl_socket_nthreads": "--nccl-socket-nthreads", "nccl_nsocks_perthread": "--nccl-nsocks-perthread"}
    version, mpi_library, gpu_buffers = library_fields(
        {"nccl_version": args.nccl_version, "mpi_library": args.mpi_library, "mpi_gpu_buffers": args.mpi_gpu_buffers},
        names=flags)
    for flag, value, owner in (("--nccl-version", version, "nccl"), ("--mpi-library", mpi_library, "mpi"),
                               ("--mpi-gpu-buffers", gpu_buffers, "mpi")):
        if value is not None and backend != owner:
            raise ConfigError(flag, value, f"only with --backend {owner}")
    check_library_settings(backend, Strategy(nccl_version=version, mpi_library=mpi_library, mpi_gpu_buffers=gpu_buffers,
                                             nccl_socket_nthreads=nthreads, nccl_nsocks_perthread=nsocks), cluster,
                           names=flags)
    options = CommOptions(algorithm=args.algo, protocol=args.proto, idle_s=idle_ms / 1e3,
                          socket_nthreads=nthreads, nsocks_perthread=nsocks, nccl_version=version,
                          mpi_library=mpi_library, mpi_gpu_buffers=gpu_buffers)
    n = cluster.world_size
    rows = []
    size = low
    while size <= high:
        cost = comm_cost(backend, op, size, cluster, options)
        algbw = size / cost.time_s if cost.time_s > 0 else float("inf")
        rows.append({"collective": op, "size_bytes": size, "type": "float", "time_s": cost.time_s,
                     "algbw_GBps": algbw / 1e9, "busbw_GBps": algbw * BUSBW_FACTOR[op](n) / 1e9,
                     "algorithm": cost.algorithm, "protocol": cost.protocol, "backend": backend, "world_size": n,
                     "nodes": cluster.nodes, "gpus_per_node": cluster.gpus_per_node, "gpu": cluster.gpu.name,
                     "intra_link": cluster.intra_link.name, "inter_link": cluster.inter_link.name, "source": "sim"})
        size *= factor
    if args.format == "table":
        write_out(f"# {op} on {n} ranks ({cluster.nodes} nodes x {cluster.gpus_per_node} {cluster.gpu.name}), "
                  f"intra {cluster.intra_link.name}, inter {cluster.inter_link.name}; backend {backend} (predicted)\n")
        if backend == "nccl":
            from sim.costs.backends.nccl import socket_summary

            summary = socket_summary(cluster, options)
            if summary:
                write_out(f"# {summary}\n")
        write_out(comm_table(rows))
    else:
        write_out(format_rows(rows, args.format))
    return 0
