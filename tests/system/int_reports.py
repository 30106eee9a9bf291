#!/usr/bin/env python3
"""Sends Telemetry Reports (v2.0) as a switch would, for the collector's tests.

An implementation of the report's bytes independent of telemetry/int_wire.cc,
written from the Telemetry Report 2.0 and INT 2.1 specifications and
docs/telemetry.md: the group header, one INT individual report (RepMdBits,
aggswitch's domain 0x4147 with the path id and hop index), the datagram's
IPv4 and UDP headers inside.

  int_reports.py --to 127.0.0.1:32766 path --nodes 1,2,4 --hop-ns 13333 --count 5
  int_reports.py --to 127.0.0.1:32766 garbage     # one of each bad report
  int_reports.py --to 127.0.0.1:32766 path --nodes 7,8,9 --hop-ns 1 --count 2000 --same-path
                                                  # 6,000 reports of one path id

Each switch numbers its reports from 0; path ids count from --first-seq.
"""
import argparse
import socket
import struct
import time

DOMAIN = 0x4147
# Instruction bits: ports, hop latency, queue, TX utilisation (the node id
# travels in the group header).
PORTS, LATENCY, QUEUE, TXUTIL = 0x4000, 0x2000, 0x1000, 0x0100


def inner_headers(src, dst, sport, dport):
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 48, 0, 0x4000, 64, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    return ip + struct.pack("!HHHH", sport, dport, 28, 0)


def report(node, seq, last, hop, path_id, hop_index, inner, bits):
    metadata = b""
    if bits & PORTS:
        metadata += struct.pack("!HH", hop["in"], hop["out"])
    if bits & LATENCY:
        metadata += struct.pack("!I", hop["ns"])
    if bits & QUEUE:
        metadata += struct.pack("!I", hop.get("queue", 0))
    if bits & TXUTIL:
        metadata += struct.pack("!I", hop.get("util", 0))
    metadata += struct.pack("!III", path_id[0], path_id[1], hop_index)
    main = struct.pack("!HHHH", bits, DOMAIN, 0xC000, 0)
    body = main + metadata + inner
    flags = 0x20 | (0 if last else 0x10)  # F, and I on intermediate hops
    head = struct.pack("!BBBB", 0x14, len(body) // 4, len(metadata) // 4, flags)
    group = struct.pack("!II", (2 << 28) | (seq & 0x3FFFFF), node)
    return group + head + body


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--to", required=True, help="ADDR:PORT of the collector")
    sub = p.add_subparsers(dest="what", required=True)
    path = sub.add_parser("path", help="COUNT datagrams' reports along --nodes")
    path.add_argument("--nodes", required=True, help="node ids in path order, e.g. 1,2,4")
    path.add_argument("--hop-ns", type=int, required=True, help="each hop's latency")
    path.add_argument("--util-ppm", type=int, default=0)
    path.add_argument("--count", type=int, default=1)
    path.add_argument("--first-seq", type=int, default=0, help="the first path sequence")
    path.add_argument("--src", default="10.0.0.1")
    path.add_argument("--dst", default="10.0.0.2")
    path.add_argument("--skip-hop", type=int, default=0, help="never send this hop's reports")
    path.add_argument("--same-path", action="store_true",
                      help="every datagram under path id --first-seq: repeats of one path")
    path.add_argument("--rate", type=int, default=0, help="reports per second at most (0: no limit)")
    sub.add_parser("garbage", help="one truncated, one bad-version, one non-INT report")
    a = p.parse_args()
    host, port = a.to.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    to = (host, int(port))
    if a.what == "garbage":
        good = report(9, 0, True, {"in": 1, "out": 2, "ns": 5}, (9, 0), 1,
                      inner_headers("10.9.0.1", "10.9.0.2", 1, 2), PORTS | LATENCY)
        s.sendto(good[:20], to)                        # truncated
        s.sendto(bytes([0x10]) + good[1:], to)         # version 1
        s.sendto(good[:8] + bytes([0x04]) + good[9:], to)  # inner only
        return
    nodes = [int(n) for n in a.nodes.split(",")]
    inner = inner_headers(a.src, a.dst, 5000, 47000)
    sent = {}
    total = 0
    start = time.monotonic()
    for d in range(a.count):
        path_id = (nodes[0], a.first_seq + (0 if a.same_path else d))
        for i, node in enumerate(nodes):
            if i + 1 == a.skip_hop:
                continue
            hop = {"in": 1, "out": nodes[i + 1] if i + 1 < len(nodes) else 0,
                   "ns": a.hop_ns, "util": a.util_ppm}
            seq = sent.get(node, 0)
            sent[node] = seq + 1
            s.sendto(report(node, seq, i + 1 == len(nodes), hop, path_id, i + 1, inner,
                            PORTS | LATENCY | QUEUE | TXUTIL), to)
            total += 1
            if a.rate:
                ahead = start + total / a.rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)


if __name__ == "__main__":
    main()
