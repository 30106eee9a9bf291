#!/usr/bin/env python3
"""What a hostile host sends an aggregation switch, for the security system
test (tests/system/security_dataplane_test.sh). Every datagram is a valid
aggregation header (docs/protocol.md) over a kernel UDP socket; the switch
must refuse or bound each of these without harm to anybody else.

  agg_attack.py --switch 10.0.50.253 ordered-flood --job 900 --members 256 --count 20000
      an in-band job with the ORDERED flag whose chunks never complete: each
      datagram a new chunk, members rotating (the mempool-exhaustion attack)
  agg_attack.py --switch ... squat --job 901 --count 4096 [--first-seq S]
      an in-band job of 256 members that sends one contribution to each of
      COUNT chunks and never completes them (slot squatting)
  agg_attack.py --switch ... register --first-id 5000 --count 1023
      one task-info datagram per job id (job table exhaustion)
  agg_attack.py --switch ... member --job 7 --key 0x5eed --node 1 --count 200 --value 1000
      contributions as member NODE of a job whose key it knows (a forged member)

Options common to all: --bind ADDR (source address; a secondary address of
the host spoofs another host's), --port (the switch's UDP port), --rate
(datagrams a second, 0: as fast as the socket takes them). It prints a JSON
summary: what was sent and the NACKs received, by reason.
Standard library only.
"""
import argparse
import collections
import json
import socket
import struct
import sys
import time

MAGIC, VERSION = 0xA65C, 2
CONTRIBUTION, NACK, TASK_INFO = 1, 9, 7
FLAG_TASK_INFO, FLAG_ORDERED = 1 << 7, 1 << 8
HEADER = struct.Struct("!HBBHHIIQIIHHHHBBbBII")  # 52 bytes, docs/protocol.md
# One run of the job for the whole attack (docs/protocol.md, "Runs").
INCARNATION = 0xa77ac4
NACK_REASONS = {1: "unknown_job", 2: "key_mismatch", 3: "malformed", 4: "job_table_full",
                5: "type_mismatch", 6: "task_info_conflict", 7: "rate_limited",
                8: "in_band_full", 9: "slot_quota", 10: "hold_quota", 11: "member_bound", 12: "no_upstream", 13: "addr_low_mismatch",
                14: "slot_busy", 15: "no_parameter_node", 16: "members_unbound",
                17: "not_main_server", 18: "store_full", 19: "not_stored", 20: "new_run",
                21: "run_ended", 22: "result_lost"}


def header(opcode, flags, node, job, seq, key, expected=0, node_count=0, elems=0, ack=0):
    return HEADER.pack(MAGIC, VERSION, opcode, flags, node, job, seq, key, ack, 0, expected,
                       node_count, 0xFFFF, elems, 0, 0, 0, 0, 0, INCARNATION)


class Attacker:
    def __init__(self, a):
        self.to = (a.switch, a.port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((a.bind, a.bind_port))
        self.sock.setblocking(False)
        self.rate = a.rate
        self.sent = 0
        self.nacks = collections.Counter()
        self.answers = collections.Counter()
        self.start = time.monotonic()

    def drain(self):
        while True:
            try:
                data = self.sock.recv(65535)
            except BlockingIOError:
                return
            if len(data) < HEADER.size:
                continue
            h = HEADER.unpack_from(data)
            if h[0] != MAGIC:
                continue
            if h[2] == NACK:
                self.nacks[NACK_REASONS.get(h[18], str(h[18]))] += 1
            else:
                self.answers[h[2]] += 1

    def send(self, datagram):
        if self.rate > 0:
            due = self.start + self.sent / self.rate
            while time.monotonic() < due:
                time.sleep(max(0.0, min(0.001, due - time.monotonic())))
        while True:
            try:
                self.sock.sendto(datagram, self.to)
                break
            except BlockingIOError:
                self.drain()
                time.sleep(0.0005)
        self.sent += 1
        if self.sent % 256 == 0:
            self.drain()

    def finish(self, what, linger=0.5):
        deadline = time.monotonic() + linger
        while time.monotonic() < deadline:
            self.drain()
            time.sleep(0.01)
        print(json.dumps({"attack": what, "sent": self.sent,
                          "seconds": round(time.monotonic() - self.start, 3),
                          "nacks": dict(self.nacks),
                          "answers": {str(k): v for k, v in self.answers.items()}}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--switch", required=True)
    ap.add_argument("--port", type=int, default=47000)
    ap.add_argument("--bind", default="0.0.0.0")
    ap.add_argument("--bind-port", type=int, default=0)
    ap.add_argument("--rate", type=float, default=0)
    ap.add_argument("--key", type=lambda s: int(s, 0), default=0xbad)
    sub = ap.add_subparsers(dest="what", required=True)
    o = sub.add_parser("ordered-flood")
    o.add_argument("--job", type=int, required=True)
    o.add_argument("--members", type=int, default=256)
    o.add_argument("--count", type=int, default=20000)
    o.add_argument("--elems", type=int, default=14)  # 52 + 56 = 108-byte payloads, 150-byte frames
    s = sub.add_parser("squat")
    s.add_argument("--job", type=int, required=True)
    s.add_argument("--members", type=int, default=256)
    s.add_argument("--count", type=int, default=4096)
    s.add_argument("--first-seq", type=int, default=0)
    s.add_argument("--ack", type=int, default=None, help="ack watermark (default: the first seq)")
    r = sub.add_parser("register")
    r.add_argument("--first-id", type=int, required=True)
    r.add_argument("--count", type=int, default=1023)
    m = sub.add_parser("member")
    m.add_argument("--job", type=int, required=True)
    m.add_argument("--node", type=int, required=True)
    m.add_argument("--count", type=int, default=100)
    m.add_argument("--first-seq", type=int, default=0)
    m.add_argument("--elems", type=int, default=1)
    m.add_argument("--value", type=int, default=1000)
    a = ap.parse_args()

    t = Attacker(a)
    if a.what == "ordered-flood":
        payload = struct.pack("<%di" % a.elems, *([7] * a.elems))
        for i in range(a.count):
            node = i % a.members
            t.send(header(CONTRIBUTION, FLAG_TASK_INFO | FLAG_ORDERED, node, a.job, i, a.key,
                          a.members, 1, a.elems, ack=i) + payload)
    elif a.what == "squat":
        payload = struct.pack("<i", 1)
        ack = a.first_seq if a.ack is None else a.ack
        for i in range(a.count):
            t.send(header(CONTRIBUTION, FLAG_TASK_INFO, 0, a.job, a.first_seq + i, a.key,
                          a.members, 1, 1, ack=ack) + payload)
    elif a.what == "register":
        for i in range(a.count):
            t.send(header(TASK_INFO, FLAG_TASK_INFO, 0, a.first_id + i, 0, a.key, 4, 1))
    elif a.what == "member":
        payload = struct.pack("<%di" % a.elems, *([a.value] * a.elems))
        for i in range(a.count):
            t.send(header(CONTRIBUTION, 0, a.node, a.job, a.first_seq + i, a.key, 0, 0, a.elems)
                   + payload)
    t.finish(a.what)
    return 0


if __name__ == "__main__":
    sys.exit(main())
