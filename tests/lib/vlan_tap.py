#!/usr/bin/env python3
"""A userspace 802.1Q sub-interface: PARENT.VID as a TAP device.

Some kernels (this test machine's among them) are built without 8021q, so
`ip link add ... type vlan` fails. This relay gives a namespace the same thing:
frames tagged VID on PARENT come out of the TAP device "PARENT.VID" untagged,
and frames the kernel sends on the TAP leave PARENT tagged VID. The kernel's
own IP stack (ARP, ICMP, UDP sockets) runs on the TAP unchanged.

    ip netns exec h2 python3 vlan_tap.py eth0 20 &   # then: ip addr add ... dev eth0.20

Runs until killed. Standard library only.
"""
import fcntl
import os
import select
import socket
import struct
import sys

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
ETH_P_ALL = 0x0003
ETH_P_8021Q = 0x8100
SOL_PACKET = 263
PACKET_AUXDATA = 8
TP_STATUS_VLAN_VALID = 1 << 4
PACKET_OUTGOING = 4
# struct tpacket_auxdata: status, len, snaplen, mac, net, vlan_tci, vlan_tpid
AUXDATA = struct.Struct("IIIHHHH")


def open_tap(name):
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    return fd


def main():
    parent, vid = sys.argv[1], int(sys.argv[2])
    tap = open_tap(f"{parent}.{vid}")
    raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    raw.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
    raw.bind((parent, 0))
    tag = struct.pack("!HH", ETH_P_8021Q, vid)
    while True:
        ready, _, _ = select.select([raw, tap], [], [])
        if raw in ready:
            frame, anc, _, addr = raw.recvmsg(65535, socket.CMSG_SPACE(AUXDATA.size))
            if addr[2] == PACKET_OUTGOING:
                continue
            frame_vid = None
            for level, kind, data in anc:
                # The kernel may have moved the tag out of the frame into aux data.
                if level == SOL_PACKET and kind == PACKET_AUXDATA:
                    status, *_, tci, _tpid = AUXDATA.unpack(data[:AUXDATA.size])
                    if status & TP_STATUS_VLAN_VALID:
                        frame_vid = tci & 0x0FFF
            if frame_vid is None and len(frame) >= 18 and frame[12:14] == b"\x81\x00":
                frame_vid = struct.unpack("!H", frame[14:16])[0] & 0x0FFF
                frame = frame[:12] + frame[16:]
            if frame_vid == vid:
                os.write(tap, frame)
        if tap in ready:
            frame = os.read(tap, 65535)
            raw.send(frame[:12] + tag + frame[12:])


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
