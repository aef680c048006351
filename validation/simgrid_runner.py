"""Run one communication pattern in SimGrid and print its time as JSON (stand-alone: simgrid + stdlib).

Runs under the system python3 that Debian's python3-simgrid (3.32) installs for; scalebench's own
environment calls it as a subprocess (validation/simgrid_check.py). Usage: ``python3 simgrid_runner.py SPEC.json``.

The platform is either SimGrid's own fat tree (``"platform": "fat_tree"``: a FatTree zone from the
PGFT numbers, every link ``bandwidth_Bps``/``latency_s``, split-duplex; SimGrid routes it) or a
full zone built from the spec (``"platform": "routes"``: one host per NIC port with a tx and an rx
link, the fabric's directed links, and the given route of every pair the pattern uses).
A third platform, ``"library_ring"``, is one ring of a pipelined collective library (NCCL: a hop's
latency delays the data, not the sender): member i's send to i + 1 is a transfer of ``bytes`` over
its own wire (``wire_Bps[i]``, no latency) to a relay host, which holds the sender for the bytes'
time alone; when it is done the sender posts a zero-byte notice to i + 1 over a link of latency
``delay_s[i]`` (the link's alpha + the library's hop latency), and i + 1 may use step k once that
notice is in. Every member waits ``base_s`` before its first step (the library's base latency).
Patterns (``"pattern"``) mirror sim/engine/patterns.py: ring (no barrier: send to the next port,
receive from the previous, both done before the next step), tree (binary reduce then broadcast),
alltoall (every message at once), alltoall_pairwise (n - 1 rounds, in round k port i sends to
i + k and receives from i - k, both done before round k + 1), pairs. Every mailbox has its receiver set, so a send starts as soon as it is posted
(SimGrid's ``Mailbox.set_receiver``), as in scalebench's flow network.
"""

import json
import sys

import simgrid as sg


def build_fat_tree(spec, hosts):
    root = sg.NetZone.create_full_zone("root")

    def set_netpoint(zone, coord, ident):
        host = zone.create_host(f"p{ident}", 1e9)
        host.seal()
        hosts[ident] = host
        return (host.netpoint, None)

    m, w, p = spec["pgft"]
    params = sg.FatTreeParams(len(m), m, w, p)
    zone = sg.NetZone.create_fatTree_zone("fat_tree", root, params, sg.ClusterCallbacks(set_netpoint, None, None),
                                          spec["bandwidth_Bps"], spec["latency_s"], sg.Link.SharingPolicy.SPLITDUPLEX)
    zone.seal()
    root.seal()


def build_routes(spec, hosts):
    zone = sg.NetZone.create_full_zone("routes")
    tx, rx = [], []
    for i in range(spec["ports"]):
        host = zone.create_host(f"p{i}", 1e9)
        host.seal()
        hosts[i] = host
        tx.append(zone.create_link(f"p{i}.tx", spec["host_bandwidth_Bps"]).set_latency(spec["host_latency_s"]).seal())
        rx.append(zone.create_link(f"p{i}.rx", spec["host_bandwidth_Bps"]).set_latency(spec["host_latency_s"]).seal())
    links = [zone.create_link(name, bw).set_latency(lat).seal() for name, bw, lat in spec["links"]]
    for key, route in spec["routes"].items():
        src, dst = (int(x) for x in key.split(","))
        hops = [tx[src]] + [links[i] for i in route] + [rx[dst]]
        zone.add_route(hosts[src].netpoint, hosts[dst].netpoint, None, None, [sg.LinkInRoute(h) for h in hops], False)
    zone.seal()


def build_library_ring(spec, hosts):
    zone = sg.NetZone.create_full_zone("library_ring")
    m = len(spec["wire_Bps"])
    members = [zone.create_host(f"r{i}", 1e9) for i in range(m)]
    relays = [zone.create_host(f"x{i}", 1e9) for i in range(m)]
    for host in members + relays:
        host.seal()
    for i in range(m):
        hosts[i], hosts[m + i] = members[i], relays[i]
        # a latency of 1e-15 s rather than 0: CM02 weighs a flow's share by its route's latency
        wire = zone.create_link(f"e{i}.wire", spec["wire_Bps"][i]).set_latency(1e-15).seal()
        delay = zone.create_link(f"e{i}.delay", 1e18).set_latency(spec["delay_s"][i]).seal()
        zone.add_route(members[i].netpoint, relays[i].netpoint, None, None, [sg.LinkInRoute(wire)], False)
        zone.add_route(members[i].netpoint, members[(i + 1) % m].netpoint, None, None, [sg.LinkInRoute(delay)], False)
    zone.seal()


def run_library_ring(engine, hosts, spec):
    m, steps, size = len(spec["wire_Bps"]), spec["steps"], int(spec["bytes"])
    ends, actors = [], []
    boxes = [sg.Mailbox.by_name(f"in{i}") for i in range(m)]

    def member(i):
        notices = []
        sg.this_actor.sleep_for(spec["base_s"])
        for k in range(steps):
            wire = sg.Comm.sendto_async(hosts[i], hosts[m + i], size)
            received, _ = boxes[i].get_async()
            wire.wait()  # the bytes have left: tell i + 1, delay_s[i] from now
            notices.append(boxes[(i + 1) % m].put_async(k, 0))
            received.wait()
        ends.append(engine.clock)
        sg.Comm.wait_all(notices)  # an actor's end would cancel its notices still on their way

    for i in range(m):
        actors.append(sg.Actor.create(f"member{i}", hosts[i], member, i))
    for i in range(m):
        boxes[i].set_receiver(actors[i])
    engine.run()
    return max(ends)


def main():
    with open(sys.argv[1], encoding="utf-8") as handle:
        spec = json.load(handle)
    cfg = [f"--cfg=network/model:{spec['model']}", "--cfg=network/crosstraffic:0", "--log=root.thres:critical"]
    if spec.get("optim"):
        cfg.append(f"--cfg=network/optim:{spec['optim']}")
    if spec.get("maxmin_precision") is not None:
        cfg.append(f"--cfg=maxmin/precision:{spec['maxmin_precision']}")
    cfg += [f"--cfg={item}" for item in spec.get("cfg", [])]
    if spec.get("tcp_gamma") is not None:
        cfg.append(f"--cfg=network/TCP-gamma:{spec['tcp_gamma']}")
    engine = sg.Engine([sys.argv[0], *cfg])
    hosts = {}
    if spec["platform"] == "library_ring":
        build_library_ring(spec, hosts)
        print(json.dumps({"time_s": run_library_ring(engine, hosts, spec)}))
        return
    (build_fat_tree if spec["platform"] == "fat_tree" else build_routes)(spec, hosts)
    out = {"routes": {}}
    for src, dst in spec.get("dump_routes", []):
        links, latency = hosts[src].route_to(hosts[dst])
        out["routes"][f"{src},{dst}"] = [link.name for link in links]
    pattern = spec.get("pattern")
    if pattern:
        out["time_s"] = run_pattern(engine, hosts, pattern)
    print(json.dumps(out))


def run_pattern(engine, hosts, pattern):
    kind, ports = pattern["kind"], pattern.get("ports", [])
    ends = []
    boxes = {}

    def box(name):
        if name not in boxes:
            boxes[name] = sg.Mailbox.by_name(name)
        return boxes[name]

    actors = []
    if kind == "ring":
        n, steps, size = len(ports), pattern["steps"], int(pattern["bytes"])

        def member(i):
            mine, succ = box(f"r{i}"), box(f"r{(i + 1) % n}")
            for _ in range(steps):
                comm = succ.put_async(0, size)
                mine.get()
                comm.wait()
            ends.append(engine.clock)

        for i in range(n):
            actors.append((f"r{i}", sg.Actor.create(f"ring{i}", hosts[ports[i]], member, i)))
    elif kind == "tree":
        n, size = len(ports), int(pattern["bytes"])

        def node(i):
            children = [c for c in (2 * i + 1, 2 * i + 2) if c < n]
            for _ in children:
                box(f"u{i}").get()
            if i:
                box(f"u{(i - 1) // 2}").put(0, size)
                box(f"d{i}").get()
            ends.append(engine.clock)
            comms = [box(f"d{c}").put_async(0, size) for c in children]
            sg.Comm.wait_all(comms)

        for i in range(n):
            actor = sg.Actor.create(f"tree{i}", hosts[ports[i]], node, i)
            actors += [(f"u{i}", actor), (f"d{i}", actor)]
    elif kind == "alltoall_pairwise":
        n, size = len(ports), int(pattern["bytes"])

        def peer(i):
            for k in range(1, n):
                comm = box(f"x{(i + k) % n}.{k}").put_async(0, size)
                box(f"x{i}.{k}").get()
                comm.wait()
            ends.append(engine.clock)

        for i in range(n):
            actor = sg.Actor.create(f"pair{i}", hosts[ports[i]], peer, i)
            actors += [(f"x{i}.{k}", actor) for k in range(1, n)]
    else:  # alltoall, pairs: every message at once
        size = int(pattern["bytes"])
        messages = ([(a, b) for a in ports for b in ports if a != b] if kind == "alltoall"
                    else [tuple(x) for x in pattern["pairs"]])
        inbound = {}
        for _, b in messages:
            inbound[b] = inbound.get(b, 0) + 1

        def sender(a, targets):
            sg.Comm.wait_all([box(f"a{b}").put_async(0, size) for b in targets])
            ends.append(engine.clock)

        def receiver(b, count):
            for _ in range(count):
                box(f"a{b}").get()
            ends.append(engine.clock)

        targets = {}
        for a, b in messages:
            targets.setdefault(a, []).append(b)
        for a, ts in targets.items():
            sg.Actor.create(f"send{a}", hosts[a], sender, a, ts)
        for b, count in inbound.items():
            actors.append((f"a{b}", sg.Actor.create(f"recv{b}", hosts[b], receiver, b, count)))
    for name, actor in actors:
        box(name).set_receiver(actor)
    engine.run()
    return max(ends)


if __name__ == "__main__":
    main()
