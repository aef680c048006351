"""Emulated networks on one machine: a network namespace of our own whose loopback tc shapes.

Two topologies:
- shared: one tbf on the namespace's loopback; every flow of every rank shares that one rate
  (a shared medium, or one NIC all ranks sit behind);
- per_link: htb with one class per TCP flow direction at the rate (a full mesh of point-to-point
  links). gloo's ports are ephemeral, so the filters are installed by rank 0 once the process
  group's connections are open (``install_per_link``, reading them with ``ss``).
netem is not available here, so no latency is added (tbf adds none): rows say so.
Only loopback addresses, only in namespaces created here; each is deleted on exit, on error,
on Ctrl-C and on SIGTERM, by the reaper when this process is killed outright (SIGKILL,
real/lifecycle.py), and stale ones of dead scalebench processes are removed first.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import uuid

from sim.errors import ConfigError

PREFIX = "scalebench-"
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(mbit|gbit)$")


class NetnsUnavailable(ConfigError):
    """No root, or no ip/tc: the emulated links cannot be set up here."""


MIN_RATE_BPS = 1e6
"""Slowest emulated link (assumed: below 1 Mbit/s a run's 64 MiB collective takes minutes, past
the harness' timeouts). tc itself refuses a rate of 0 with its usage text (issue 29)."""
MAX_RATE_BPS = 1e12
"""Fastest: tbf's 64-bit rate (TCA_TBF_RATE64) goes far beyond, but a loopback moves a few GB/s
here (DESIGN.md: memcpy 4 GB/s), so 1 Tbit/s already shapes nothing."""


def parse_rate(link: str) -> float:
    """'100mbit' | '1gbit' | '10gbit' | '<n>mbit|gbit' -> bits per second, within MIN/MAX_RATE_BPS."""
    m = _RATE.match(str(link).strip().lower())
    if not m:
        raise ConfigError("--link", link, "a rate such as 100mbit, 1gbit or 10gbit")
    rate = float(m.group(1)) * (1e6 if m.group(2) == "mbit" else 1e9)
    if not MIN_RATE_BPS <= rate <= MAX_RATE_BPS:
        raise ConfigError("--link", link, "a rate from 1mbit to 1000gbit (e.g. 100mbit, 1gbit, 10gbit)")
    return rate


def availability() -> tuple[bool, str]:
    """(usable, why not): needs root, iproute2's ip and tc, and a working namespace."""
    if os.geteuid() != 0:
        return False, "emulated links need root (ip netns add, tc)"
    for tool in ("ip", "tc", "ss"):
        if shutil.which(tool) is None:
            return False, f"emulated links need the '{tool}' command (iproute2)"
    return True, ""


def check_link(link: str) -> float:
    rate = parse_rate(link)
    ok, why = availability()
    if not ok:
        raise NetnsUnavailable("--link", link, why)
    return rate


def _run(*cmd: str) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise NetnsUnavailable("--link", " ".join(cmd), f"a working command ({out.stderr.strip()})")


def burst_bytes(rate_bps: float) -> int:
    """tbf bucket: at least two 64 KiB loopback packets (lo's MTU is 65536), ~2 ms of traffic."""
    return int(max(2 * 65536 + 2048, rate_bps / 8 * 0.002))


def remove_stale() -> None:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    for line in out.stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        m = re.match(rf"^{PREFIX}(\d+)-", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


class Namespace:
    """``with Namespace("1gbit", "shared") as ns: ... ip netns exec ns.name ...``"""

    def __init__(self, link: str, topology: str = "shared"):
        self.rate_bps = check_link(link)
        if topology not in ("shared", "per_link"):
            raise ConfigError("topology", topology, ("shared", "per_link"))
        self.link, self.topology = link, topology
        self.name = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._old_term = None

    def __enter__(self) -> Namespace:
        remove_stale()
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):  # the CLI installs its own
            self._old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            from real.lifecycle import hold

            hold("netns", self.name)  # the reaper deletes it if this process is killed outright
            _run("ip", "netns", "add", self.name)
            _run("ip", "netns", "exec", self.name, "ip", "link", "set", "lo", "up")
            ex = ("ip", "netns", "exec", self.name, "tc")
            if self.topology == "shared":
                _run(*ex, "qdisc", "add", "dev", "lo", "root", "tbf", "rate", f"{int(self.rate_bps)}bit",
                     "burst", str(burst_bytes(self.rate_bps)), "latency", "100ms")
            else:  # default class unshaped until install_per_link adds the per-flow classes
                _run(*ex, "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "1")
                _run(*ex, "class", "add", "dev", "lo", "parent", "1:", "classid", "1:1", "htb", "rate", "100gbit")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        from real.lifecycle import release

        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)
        release("netns", self.name)
        if self._old_term is not None:
            signal.signal(signal.SIGTERM, self._old_term)
            self._old_term = None


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def established_flows() -> list[tuple[int, int]]:
    """(source port, destination port) of each direction of each established TCP connection."""
    out = subprocess.run(["ss", "-tnH", "state", "established"], capture_output=True, text=True, timeout=30)
    flows = set()
    for line in out.stdout.splitlines():
        parts = line.split()
        addrs = [p for p in parts if re.match(r"^[\d.\[\]:a-f]+:\d+$", p)]
        if len(addrs) < 2:
            continue
        local, peer = (int(a.rsplit(":", 1)[1]) for a in addrs[:2])
        flows.add((local, peer))
    return sorted(flows)


def install_per_link(rate_bps: float) -> int:
    """Inside the namespace: one htb class at ``rate_bps`` per flow direction; returns the count."""
    flows = established_flows()
    for i, (sport, dport) in enumerate(flows):
        classid = f"1:{10 + i:x}"
        _run("tc", "class", "add", "dev", "lo", "parent", "1:", "classid", classid, "htb",
             "rate", f"{int(rate_bps)}bit", "ceil", f"{int(rate_bps)}bit", "burst", str(burst_bytes(rate_bps)))
        _run("tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
             "match", "ip", "sport", str(sport), "0xffff", "match", "ip", "dport", str(dport), "0xffff",
             "flowid", classid)
    return len(flows)
