#!/usr/bin/env python3
"""RoCEv2 frames through aggswitch's L2 path (roce_frames_netns_test.sh).

Each flow of FLOWS is one queue pair's traffic from one host to another:
Ethernet (802.1Q tagged or not), IPv4 with the flow's DSCP and ECN, UDP to
4791 (checksum 0, as RoCEv2 NICs send it), an InfiniBand BTH whose PSN
counts the flow's frames (24 bits, wrapping), a RETH for RDMA WRITEs, a
payload, and the ICRC computed as the InfiniBand spec says. The flow table
says, per flow, the tag it is sent with and the tag it must arrive with.

  roce_frames.py learn --iface eth0 [--vlans 10,20]
      one broadcast per VLAN (untagged when no --vlans) from IFACE's MAC, so
      that the switch learns the host there
  roce_frames.py recv --iface eth0 --out FILE --ready FILE
      records every frame IFACE receives until SIGTERM, the 802.1Q tag the
      kernel moved into PACKET_AUXDATA put back in place (TPID and the whole
      TCI: PCP, DEI, VID)
  roce_frames.py send --host h0 --mac h0=MAC ... --out FILE [--frames 400]
      sends HOST's flows, round robin, each frame in four followed by other
      traffic (a broadcast, or UDP to another port), the first --burst frames
      back to back, then 32 at a time; FILE records what left
  roce_frames.py check --sent h0=FILE ... --got h1=FILE ...
      per flow: frames sent, received, lost, corrupted (not byte for byte the
      frame sent with the flow's expected tag change; and on their own: DSCP
      or ECN not the flow's, tag not the expected one, IPv4 checksum or ICRC
      wrong), reordered (a PSN below one seen before), duplicated, delivered
      to a host not its destination; exit 0 only when every flow arrived
      whole, in order, once, and only where it was sent

Needs root (AF_PACKET). Standard library only.
"""
import argparse
import random
import select
import signal
import socket
import struct
import sys
import time
import zlib

ETH_P_ALL = 0x0003
ETH_P_IPV4 = 0x0800
ETH_P_8021Q = 0x8100
ETH_P_LEARN = 0x88B5  # IEEE local experimental: the learning broadcasts
SOL_PACKET = 263
PACKET_AUXDATA = 8
PACKET_OUTGOING = 4
TP_STATUS_VLAN_VALID = 1 << 4
TP_STATUS_VLAN_TPID_VALID = 1 << 6
# struct tpacket_auxdata: status, len, snaplen, mac, net, vlan_tci, vlan_tpid
AUXDATA = struct.Struct("IIIHHHH")

ROCE_PORT = 4791
OTHER_PORT = 5001
BTH_WRITE_ONLY = 0x0A  # RC RDMA WRITE Only: BTH, RETH, payload
BTH_SEND_ONLY = 0x04  # RC SEND Only: BTH, payload
ECN_NAMES = {0b00: "Not-ECT", 0b01: "ECT(1)", 0b10: "ECT(0)", 0b11: "CE"}


class Flow:
    """One queue pair's frames: `tag_in` as sent, `tag_out` as they must
    arrive; a tag is (pcp, dei, vid), None for untagged."""

    def __init__(self, name, src, dst, tag_in, tag_out, dscp, ecn, opcode, psn0, path):
        self.name, self.src, self.dst = name, src, dst
        self.tag_in, self.tag_out = tag_in, tag_out
        self.dscp, self.ecn, self.opcode, self.psn0 = dscp, ecn, opcode, psn0
        self.path = path

    @property
    def index(self):
        return FLOWS.index(self)

    @property
    def sport(self):  # RoCEv2's per-QP entropy port; identifies the flow here
        return 0xC000 + self.index

    @property
    def qpn(self):
        return 0x000100 + self.index


# h0, h1: access ports in VLAN 10; h2, h3: trunks carrying 10 and 20.
# An untagged frame from an access port gets PCP 0, DEI 0 on a trunk; a
# priority tag (VID 0) keeps its PCP and DEI and gets the VLAN; a tagged
# frame keeps PCP and DEI trunk to trunk; a frame leaves an access port
# untagged (docs/architecture.md, "RoCEv2 through the switch").
FLOWS = [
    Flow("qp-a", "h0", "h1", None, None, 26, 0b10, BTH_WRITE_ONLY, 0, "access -> access"),
    Flow("qp-b", "h0", "h1", None, None, 46, 0b11, BTH_SEND_ONLY, 0xFFFF00, "access -> access"),
    Flow("qp-c", "h0", "h2", None, (0, 0, 10), 0, 0b01, BTH_WRITE_ONLY, 1000, "access -> trunk"),
    Flow("qp-d", "h0", "h2", (5, 0, 0), (5, 0, 10), 26, 0b01, BTH_WRITE_ONLY, 77,
         "access (priority tag) -> trunk"),
    Flow("qp-e", "h0", "h1", (3, 1, 0), None, 46, 0b11, BTH_SEND_ONLY, 5,
         "access (priority tag) -> access"),
    Flow("qp-f", "h2", "h3", (3, 0, 20), (3, 0, 20), 26, 0b10, BTH_WRITE_ONLY, 0, "trunk -> trunk"),
    Flow("qp-g", "h2", "h3", (5, 1, 20), (5, 1, 20), 46, 0b11, BTH_WRITE_ONLY, 0xFFFFF0,
         "trunk -> trunk"),
    Flow("qp-h", "h2", "h3", (5, 0, 10), (5, 0, 10), 26, 0b01, BTH_SEND_ONLY, 9, "trunk -> trunk"),
    Flow("qp-i", "h2", "h1", (3, 0, 10), None, 0, 0b01, BTH_WRITE_ONLY, 0, "trunk -> access"),
    Flow("qp-j", "h3", "h2", (3, 1, 20), (3, 1, 20), 26, 0b01, BTH_WRITE_ONLY, 123456,
         "trunk -> trunk"),
]
FLOW_BY_SPORT = {f.sport: f for f in FLOWS}
HOST_IP = {"h0": 0x0A000A01, "h1": 0x0A000A02, "h2": 0x0A000A03, "h3": 0x0A000A04}
# The VLANs each host is in, and how it sends its other traffic (None: untagged).
HOST_VLANS = {"h0": {10}, "h1": {10}, "h2": {10, 20}, "h3": {10, 20}}
HOST_TAGS = {"h0": [None], "h1": [None], "h2": [10, 20], "h3": [10, 20]}


def mac_bytes(text):
    return bytes(int(x, 16) for x in text.split(":"))


def tag_bytes(tag):
    pcp, dei, vid = tag
    return struct.pack("!HH", ETH_P_8021Q, (pcp << 13) | (dei << 12) | vid)


def ip_checksum(header):
    s = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def icrc(ip_udp_bth_rest):
    """The RoCEv2 invariant CRC of an IPv4 packet (from its IP header to the
    end of the payload): CRC-32 over 8 bytes of ones (in place of the LRH)
    and the packet with the fields a network may change masked to ones
    (IPv4 TOS, TTL and checksum, the UDP checksum, the BTH's resv8a byte
    that holds FECN/BECN), sent least significant byte first."""
    p = bytearray(ip_udp_bth_rest)
    p[1] = 0xFF  # TOS: DSCP and ECN
    p[8] = 0xFF  # TTL
    p[10:12] = b"\xff\xff"  # header checksum
    p[26:28] = b"\xff\xff"  # UDP checksum
    p[32] = 0xFF  # BTH resv8a
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(p)))


def roce_frame(flow, i, macs):
    """Frame i of `flow` as its source sends it."""
    psn = (flow.psn0 + i) & 0xFFFFFF
    rnd = random.Random(flow.index << 32 | i)
    size = 4 * rnd.randint(4, 256)  # 16..1024 bytes, whole dwords: pad count 0
    payload = rnd.randbytes(size)
    ack_req = 0x80 if i % 16 == 15 else 0
    bth = struct.pack("!BBHI", flow.opcode, 0x40, 0xFFFF, flow.qpn) + struct.pack(
        "!I", ack_req << 24 | psn)
    if flow.opcode == BTH_WRITE_ONLY:
        bth += struct.pack("!QII", 0x7F0000000000 + i * 4096, 0x1234 + flow.index, size)
    udp_len = 8 + len(bth) + size + 4
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, flow.dscp << 2 | flow.ecn, 20 + udp_len,
                               i & 0xFFFF, 0x4000, 64, 17, 0,
                               HOST_IP[flow.src].to_bytes(4, "big"),
                               HOST_IP[flow.dst].to_bytes(4, "big")))
    ip[10:12] = struct.pack("!H", ip_checksum(bytes(ip)))
    packet = bytes(ip) + struct.pack("!HHHH", flow.sport, ROCE_PORT, udp_len, 0) + bth + payload
    packet += icrc(packet)
    tag = tag_bytes(flow.tag_in) if flow.tag_in else b""
    return mac_bytes(macs[flow.dst]) + mac_bytes(macs[flow.src]) + tag + \
        struct.pack("!H", ETH_P_IPV4) + packet


def other_frame(host, k, macs):
    """The k-th frame of the other traffic a host sends between its flows:
    broadcasts (flooded to every port of the VLAN) and UDP to another port
    of a host in the VLAN."""
    vid = HOST_TAGS[host][k % len(HOST_TAGS[host])]
    tag = tag_bytes((k % 8, 0, vid)) if vid else b""
    src = mac_bytes(macs[host])
    if k % 2 == 0:
        return b"\xff" * 6 + src + tag + struct.pack("!H", ETH_P_LEARN) + bytes(100)
    peers = [h for h in sorted(HOST_VLANS) if h != host and (vid or 10) in HOST_VLANS[h]]
    dst = mac_bytes(macs[peers[k // 2 % len(peers)]])
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 8 + 200, k & 0xFFFF, 0x4000, 64, 17,
                               0, HOST_IP[host].to_bytes(4, "big"), bytes(4)))
    ip[10:12] = struct.pack("!H", ip_checksum(bytes(ip)))
    udp = struct.pack("!HHHH", 40000, OTHER_PORT, 208, 0) + bytes(200)
    return dst + src + tag + struct.pack("!H", ETH_P_IPV4) + bytes(ip) + udp


def parse_macs(pairs):
    return dict(p.split("=", 1) for p in pairs)


def raw_socket(iface, receive):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW,
                      socket.htons(ETH_P_ALL) if receive else 0)
    s.bind((iface, 0))
    return s


def learn(args):
    s = raw_socket(args.iface, False)
    src = s.getsockname()[4]
    vlans = [int(v) for v in args.vlans.split(",")] if args.vlans else [None]
    for vid in vlans:
        tag = tag_bytes((0, 0, vid)) if vid is not None else b""
        s.send(b"\xff" * 6 + src + tag + struct.pack("!H", ETH_P_LEARN) + bytes(46))
    return 0


def write_frames(path, frames):
    with open(path, "wb") as out:
        for f in frames:
            out.write(struct.pack("!I", len(f)) + f)


def read_frames(path):
    with open(path, "rb") as f:
        data = f.read()
    frames, off = [], 0
    while off < len(data):
        (n,) = struct.unpack_from("!I", data, off)
        frames.append(data[off + 4:off + 4 + n])
        off += 4 + n
    return frames


def recv(args):
    raw = raw_socket(args.iface, True)
    raw.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
    raw.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)  # SO_RCVBUFFORCE: 32 MiB
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    frames = []
    with open(args.ready, "w") as ready:
        ready.write("ready\n")

    def take():
        frame, anc, _, addr = raw.recvmsg(65535, socket.CMSG_SPACE(AUXDATA.size))
        if addr[2] == PACKET_OUTGOING:
            return
        for level, kind, data in anc:
            if level == SOL_PACKET and kind == PACKET_AUXDATA:
                status, *_, tci, tpid = AUXDATA.unpack(data[:AUXDATA.size])
                if status & TP_STATUS_VLAN_VALID:
                    if not status & TP_STATUS_VLAN_TPID_VALID:
                        tpid = ETH_P_8021Q
                    frame = frame[:12] + struct.pack("!HH", tpid, tci) + frame[12:]
        frames.append(frame)

    while not stop:
        try:
            ready_fds, _, _ = select.select([raw], [], [], 0.2)
        except InterruptedError:
            continue
        if ready_fds:
            take()
    raw.setblocking(False)  # what is queued still counts
    while True:
        try:
            take()
        except BlockingIOError:
            break
    write_frames(args.out, frames)
    return 0


def send(args):
    macs = parse_macs(args.mac)
    flows = [f for f in FLOWS if f.src == args.host]
    s = raw_socket("eth0", False)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    order, k = [], 0
    for i in range(args.frames):
        for f in flows:
            order.append(roce_frame(f, i, macs))
            if len(order) % 4 == 0:
                order.append(other_frame(args.host, k, macs))
                k += 1
    sent = []
    for n, frame in enumerate(order):
        s.send(frame)
        sent.append(frame)
        if n >= args.burst and n % 32 == 31:
            time.sleep(args.gap)
    write_frames(args.out, sent)
    print(f"{args.host}: sent {len(sent)} frames, {len(flows) * args.frames} of them RoCEv2 "
          f"in {len(flows)} flows")
    return 0


def roce_sport(frame):
    """The UDP source port of a RoCEv2 frame (tagged or not), else None."""
    off = 16 if frame[12:14] == b"\x81\x00" else 12
    if frame[off:off + 2] != b"\x08\x00" or len(frame) < off + 2 + 28:
        return None
    ip = off + 2
    if frame[ip + 9] != 17:
        return None
    ihl = (frame[ip] & 0x0F) * 4
    sport, dport = struct.unpack_from("!HH", frame, ip + ihl)
    return sport if dport == ROCE_PORT else None


def psn_of(frame):
    off = 18 if frame[12:14] == b"\x81\x00" else 14
    ihl = (frame[off] & 0x0F) * 4
    return struct.unpack_from("!I", frame, off + ihl + 8 + 8)[0] & 0xFFFFFF


def expected_egress(flow, sent):
    """The frame sent, with the tag its destination must see instead."""
    inner = sent[:12] + (sent[16:] if flow.tag_in else sent[12:])
    return inner[:12] + (tag_bytes(flow.tag_out) if flow.tag_out else b"") + inner[12:]


def header_fields(frame):
    """The fields a switch could get wrong, as text: tag, DSCP, ECN, and
    whether the IPv4 checksum and the ICRC hold."""
    tagged = frame[12:14] == b"\x81\x00"
    off = 18 if tagged else 14
    tci = struct.unpack_from("!H", frame, 14)[0] if tagged else None
    ip = frame[off:off + 20]
    return {
        "tag": tag_text(None if tci is None else (tci >> 13, tci >> 12 & 1, tci & 0xFFF)),
        "DSCP": ip[1] >> 2 if len(ip) > 1 else None,
        "ECN": ECN_NAMES[ip[1] & 3] if len(ip) > 1 else None,
        "IPv4 checksum ok": len(ip) == 20 and ip_checksum(ip) == 0,
        "ICRC ok": len(frame) > off + 32 and icrc(frame[off:-4]) == frame[-4:],
        "length": len(frame),
    }


def describe(expected, got):
    """What differs, by field, for the first corrupted frames' lines."""
    e, g = header_fields(expected), header_fields(got)
    diffs = [f"{k} {e[k]} -> {g[k]}" for k in e if e[k] != g[k]]
    if len(expected) == len(got):
        first = next(j for j in range(len(got)) if got[j] != expected[j])
        diffs.append(f"first differing byte at {first}: {expected[first]:#04x} -> {got[first]:#04x}")
    return "; ".join(diffs)


def tag_text(tag):
    return "untagged" if tag is None else f"PCP {tag[0]} DEI {tag[1]} VID {tag[2]}"


def check(args):
    sent = {}  # flow name -> its frames, in order
    ok = True
    for pair in args.sent:
        host, path = pair.split("=", 1)
        for frame in read_frames(path):
            flow = FLOW_BY_SPORT.get(roce_sport(frame) or -1)
            if flow is None:
                continue
            sent.setdefault(flow.name, []).append(frame)
            f = header_fields(frame)
            if not (f["IPv4 checksum ok"] and f["ICRC ok"]):
                ok = False
                print(f"NOT {flow.name} frame {len(sent[flow.name]) - 1} left {host} broken "
                      "(the builder's fault, not the switch's)")
    counts = ("received", "corrupted", "dscp_ecn", "tag", "ip_checksum", "icrc", "reordered",
              "duplicated", "misdelivered")
    stats = {f.name: dict({c: 0 for c in counts}, seen=set(), last=-1) for f in FLOWS}
    lines = []
    unknown = 0
    for pair in args.got:
        host, path = pair.split("=", 1)
        for frame in read_frames(path):
            sport = roce_sport(frame)
            if sport is None:
                continue  # other traffic
            flow = FLOW_BY_SPORT.get(sport)
            if flow is None:
                unknown += 1
                continue
            st = stats[flow.name]
            if host != flow.dst:
                st["misdelivered"] += 1
                continue
            st["received"] += 1
            # What a receiver would check on its own, whatever was sent.
            f = header_fields(frame)
            st["dscp_ecn"] += (f["DSCP"], f["ECN"]) != (flow.dscp, ECN_NAMES[flow.ecn])
            st["tag"] += f["tag"] != tag_text(flow.tag_out)
            st["ip_checksum"] += not f["IPv4 checksum ok"]
            st["icrc"] += not f["ICRC ok"]
            # Against the very frame sent.
            i = (psn_of(frame) - flow.psn0) & 0xFFFFFF
            frames = sent.get(flow.name, [])
            if i >= len(frames):
                st["corrupted"] += 1
                lines.append(f"  {flow.name}: PSN {psn_of(frame):#08x} was never sent")
                continue
            if i in st["seen"]:
                st["duplicated"] += 1
            st["seen"].add(i)
            if i < st["last"]:
                st["reordered"] += 1
            st["last"] = max(st["last"], i)
            want = expected_egress(flow, frames[i])
            if frame != want:
                st["corrupted"] += 1
                if st["corrupted"] <= 3:
                    lines.append(f"  {flow.name} PSN {psn_of(want):#08x}: {describe(want, frame)}")
    total = dict(sent=0, lost=0, **{c: 0 for c in counts})
    for flow in FLOWS:
        st = stats[flow.name]
        n_sent = len(sent.get(flow.name, []))
        st["sent"], st["lost"] = n_sent, n_sent - len(st["seen"])
        bad = n_sent == 0 or any(st[c] for c in counts[1:] + ("lost",))
        ok &= not bad
        print(f"{'NOT' if bad else 'ok '} {flow.name} {flow.src}->{flow.dst} {flow.path}, "
              f"{tag_text(flow.tag_in)} -> {tag_text(flow.tag_out)}, DSCP {flow.dscp} "
              f"{ECN_NAMES[flow.ecn]}: {summary(st)}")
        for key in total:
            total[key] += st[key]
    for line in lines:
        print(line)
    if unknown:
        ok = False
        print(f"NOT {unknown} frames to UDP {ROCE_PORT} of no flow (source port rewritten?)")
    print(f"total: {summary(total)}")
    return 0 if ok else 1


def summary(st):
    return (f"sent {st['sent']}, received {st['received']}, lost {st['lost']}, "
            f"corrupted {st['corrupted']} (DSCP/ECN changed {st['dscp_ecn']}, tag changed "
            f"{st['tag']}, bad IPv4 checksum {st['ip_checksum']}, bad ICRC {st['icrc']}), "
            f"reordered {st['reordered']}, duplicated {st['duplicated']}, "
            f"misdelivered {st['misdelivered']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("learn")
    p.add_argument("--iface", default="eth0")
    p.add_argument("--vlans", default="")
    p = sub.add_parser("recv")
    p.add_argument("--iface", default="eth0")
    p.add_argument("--out", required=True)
    p.add_argument("--ready", required=True)
    p = sub.add_parser("send")
    p.add_argument("--host", required=True)
    p.add_argument("--mac", action="append", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--frames", type=int, default=400, help="per flow")
    p.add_argument("--burst", type=int, default=256, help="frames sent back to back first")
    p.add_argument("--gap", type=float, default=0.001, help="seconds after each 32 frames")
    p = sub.add_parser("check")
    p.add_argument("--sent", action="append", required=True)
    p.add_argument("--got", action="append", required=True)
    args = ap.parse_args()
    return {"learn": learn, "recv": recv, "send": send, "check": check}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
