#!/usr/bin/env python3
"""UDP traffic and link captures for the INT system test (int_netns_test.sh).

  int_traffic.py send --to 10.0.78.2 --port 5000 --count 20 [--flows 48]
      sends COUNT datagrams of 100 bytes, "P<port> #<i>" then a pattern;
      with --flows, COUNT from each of FLOWS sockets (source ports), so
      that a switch's flow hash spreads them over an uplink group.
  int_traffic.py capture --iface eth0 --out FILE --seconds 8 [--bind 5000,6000]
      records every IPv4/UDP datagram seen on IFACE (both directions) as
      JSON lines {"dir": "in"|"out", "dport", "len", "hex"}, where hex is
      the whole IPv4 datagram; with --bind it also receives on those UDP
      ports (so that the kernel takes the datagrams; it drops any whose
      checksum is wrong) and records {"socket": port, "payload": hex}.
Standard library only; needs root (AF_PACKET) for capture.
"""
import argparse
import json
import select
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


def payload(port, i):
    head = f"P{port} #{i} ".encode()
    return head + bytes((i + k) & 0xFF for k in range(100 - len(head)))


def send(args):
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(args.flows)]
    for i in range(args.count):
        for s in socks:
            s.sendto(payload(args.port, i), (args.to, args.port))
        time.sleep(args.gap)
    return 0


def capture(args):
    raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    raw.bind((args.iface, 0))
    socks = {}
    for port in filter(None, (args.bind or "").split(",")):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("0.0.0.0", int(port)))
        socks[u.fileno()] = (u, int(port))
    out = open(args.out, "w")
    ready = args.ready and open(args.ready, "w")
    if ready:
        ready.write("ready\n")
        ready.close()
    end = time.time() + args.seconds
    while time.time() < end:
        r, _, _ = select.select([raw] + [u for u, _ in socks.values()], [], [], 0.2)
        for fd in r:
            if fd is raw:
                frame, addr = raw.recvfrom(65535)
                l3 = 14
                ether = struct.unpack("!H", frame[12:14])[0]
                if ether == 0x8100:
                    l3, ether = 18, struct.unpack("!H", frame[16:18])[0]
                if ether != 0x0800 or frame[l3 + 9] != 17:
                    continue
                total = struct.unpack("!H", frame[l3 + 2:l3 + 4])[0]
                ihl = (frame[l3] & 0x0F) * 4
                dport = struct.unpack("!H", frame[l3 + ihl + 2:l3 + ihl + 4])[0]
                datagram = frame[l3:l3 + total]
                direction = "out" if addr[2] == PACKET_OUTGOING else "in"
                out.write(json.dumps({"dir": direction, "dport": dport, "len": total,
                                      "hex": datagram.hex()}) + "\n")
            else:
                u, port = socks[fd.fileno()]
                data = u.recv(65535)
                out.write(json.dumps({"socket": port, "payload": data.hex()}) + "\n")
        out.flush()
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send")
    s.add_argument("--to", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--count", type=int, default=20)
    s.add_argument("--gap", type=float, default=0.01)
    s.add_argument("--flows", type=int, default=1)
    c = sub.add_parser("capture")
    c.add_argument("--iface", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--seconds", type=float, default=8)
    c.add_argument("--bind")
    c.add_argument("--ready", help="a file written once the sockets listen")
    args = p.parse_args()
    return send(args) if args.cmd == "send" else capture(args)


if __name__ == "__main__":
    sys.exit(main())
