"""Measure what one TCP stream moves when one thread sends and one thread receives it.

A stream's bytes are copied by the kernel from the sender's buffer into the socket and from the
socket into the receiver's buffer, each on the core of the thread that calls send or recv (plus
the softirq work of every segment), so one stream moves at most what one core can copy through
the stack, however fast the link. This script times that on this machine: a sender and a receiver
process (each its own core) exchange ``--gib`` GiB over loopback in ``--chunk-mib`` MiB calls,
``--repeats`` times, and prints the median rate in Gbit/s, at the loopback's own MTU (65536) and,
where this process may create a network namespace (root), at an Ethernet MTU of 1500 inside one.
The default of ``sim.costs.transports.TcpDefaults.stream_copy_Bps`` is this script's figure.

    python scripts/measure_tcp_stream.py [--gib 2] [--repeats 5]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import time


def _receiver(port_queue, total_bytes: int, chunk_bytes: int, result_queue) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port_queue.put(server.getsockname()[1])
        conn, _ = server.accept()
        with conn:
            buf = bytearray(chunk_bytes)
            view = memoryview(buf)
            got = conn.recv_into(view)  # the clock starts at the first byte
            start = time.perf_counter()
            first = got
            while got < total_bytes:
                n = conn.recv_into(view)
                if n == 0:
                    break
                got += n
            result_queue.put((got - first) / (time.perf_counter() - start))


def one_stream_Bps(total_bytes: int, chunk_bytes: int) -> float:
    ctx = mp.get_context("fork")
    ports, results = ctx.Queue(), ctx.Queue()
    rx = ctx.Process(target=_receiver, args=(ports, total_bytes, chunk_bytes, results))
    rx.start()
    try:
        port = ports.get(timeout=30)
        payload = bytes(chunk_bytes)
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sent = 0
            while sent < total_bytes:
                sock.sendall(payload)
                sent += chunk_bytes
        return float(results.get(timeout=300))
    finally:
        rx.join(timeout=30)
        if rx.is_alive():
            rx.kill()


def measure(gib: float, repeats: int, chunk_mib: int) -> float:
    rates = [one_stream_Bps(int(gib * 2**30), chunk_mib * 2**20) for _ in range(repeats)]
    return statistics.median(rates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="GiB per run (default 2)")
    parser.add_argument("--repeats", type=int, default=5, help="runs; the median is printed (default 5)")
    parser.add_argument("--chunk-mib", type=int, default=4, help="MiB per send / recv call (default 4)")
    parser.add_argument("--mtu", type=int, default=0, help=argparse.SUPPRESS)  # the child in a namespace
    args = parser.parse_args(argv)
    rate = measure(args.gib, args.repeats, args.chunk_mib)
    label = f"MTU {args.mtu}" if args.mtu else "loopback MTU 65536"
    print(f"one TCP stream, {label}: median {rate * 8 / 1e9:.1f} Gbit/s ({rate / 1e9:.2f} GB/s) over "
          f"{args.repeats} runs of {args.gib:g} GiB, {os.cpu_count()} cores")
    if args.mtu or os.geteuid() != 0:
        return 0
    ns = f"sb-tcp-{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", ns], capture_output=True).returncode != 0:
        return 0
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "mtu", "1500", "up"], check=True)
        subprocess.run(["ip", "netns", "exec", ns, sys.executable, __file__, "--gib", str(args.gib), "--repeats",
                        str(args.repeats), "--chunk-mib", str(args.chunk_mib), "--mtu", "1500"], check=True)
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
