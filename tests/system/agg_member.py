#!/usr/bin/env python3
"""One allreduce member over a kernel UDP socket, for the system tests.

Sends one int32 contribution (docs/protocol.md) to the switch's aggregation
address, retransmits every 200 ms until the result arrives, and checks it:

    agg_member.py --switch 10.0.10.253 --job 5 --key 0x5eed --node 0 --members 2 \
                  --seq 1 --values 1,2,3 --expect 11,22,33

It sends from UDP port 40000 + node (--bind-port), the address the switch
binds the member to. With --task-info the contribution carries its task info (TASK_INFO flag,
expected = --members, node_count = 1), so the switch registers an unknown job
in-band. A NACK is reported with its reason and ends the member.

With --final the contribution is marked FINAL (the root also delivers the
chunk to the job's main server). For a job in store mode, --expect-ack
makes the switch's ACK (the contribution is kept) the success instead of a
result. --fetch NODE asks for the contribution member NODE sent to --seq
(FETCH; --release frees it after) and checks its payload against --expect;
it works from a member's port and from the main server's (--bind-port).

With --then-receive-distribute SEQ it then keeps its socket and waits for
the DISTRIBUTE of SEQ the job's main server sends through the switch,
whose int32 payload must equal --expect-distribute.

As the job's main server instead (--main-server), it sends --values as a
DISTRIBUTE of --seq to the job and waits for the switch's ACK, which must
say --expect-copies copies went out; a NACK members unbound (not now) is
retried until the timeout, any other NACK ends it:

    agg_member.py --main-server --switch 10.0.10.253 --job 5 --key 0x5eed --seq 9 \
                  --values 1,2,3 --expect-copies 4 --bind-port 45000

As the main server, --receive-final waits for the final result of --seq
(RESULT with FINAL), checks it against --expect, and ACKs every copy that
comes (ACK flagged FINAL, echoing aux and the run label) until --linger seconds pass without one:

    agg_member.py --main-server --receive-final --switch 10.0.10.253 --job 8 \
                  --key 0x5eed --seq 3 --chunks 40 --expect 10,20 --bind-port 45000

Exit 0 when the result (or distribution, or ACK) matches, 1 when it does
not, 2 on a timeout, 3 on a NACK. Standard library only.
"""
import argparse
import socket
import struct
import sys
import time

MAGIC, VERSION, CONTRIBUTION, RESULT, ACK, NACK, DISTRIBUTE, FETCH = 0xA65C, 2, 1, 3, 8, 9, 12, 13
HEADER = struct.Struct("!HBBHHIIQIIHHHHBBbBII")  # 52 bytes, docs/protocol.md
# The run of its job this process belongs to (docs/protocol.md, "Runs"):
# every datagram carries it, and the switch's answers to a member carry it
# back. One invocation stands for one step of a long-lived rank, so by
# default every invocation for a job shares one (--incarnation: another
# process, a new run).
INCARNATION = 0
FLAG_RETRANSMISSION = 1 << 1
FLAG_TASK_INFO = 1 << 7
FLAG_RELEASE = 1 << 10
FLAG_FINAL = 1 << 11
NACK_REASONS = {1: "unknown job", 2: "key mismatch", 3: "malformed", 4: "job table full",
                5: "type mismatch", 6: "task info conflict", 7: "rate limited",
                8: "in-band jobs full", 9: "slot quota", 10: "hold quota", 11: "member bound",
                16: "members unbound", 17: "not main server", 18: "store full",
                19: "not stored", 20: "new run", 21: "run ended", 22: "result lost"}
NACK_MEMBERS_UNBOUND = 16
NACK_STORE_FULL = 18


def receive(sock):
    """One datagram with an aggregation header: (header fields, datagram,
    peer), or None when none came within the socket's timeout."""
    try:
        data, peer = sock.recvfrom(65535)
    except socket.timeout:
        return None
    if len(data) < HEADER.size or HEADER.unpack_from(data)[0] != MAGIC:
        return None
    return HEADER.unpack_from(data), data, peer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--switch", required=True)
    ap.add_argument("--port", type=int, default=47000)
    ap.add_argument("--job", type=int, required=True)
    ap.add_argument("--key", type=lambda s: int(s, 0), required=True)
    ap.add_argument("--members", type=int, default=0)
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--chunks", type=int, default=1,
                    help="chunks --seq .. --seq + N - 1, one after the other, each the same values")
    ap.add_argument("--values", default="")
    ap.add_argument("--expect", default=None)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--task-info", action="store_true")
    # The switch binds a member to the address it first sent from; one
    # member's runs use one UDP port, as one client process would.
    ap.add_argument("--bind-port", type=int, default=None,
                    help="local UDP port (default 40000 + node)")
    ap.add_argument("--bind-address", default="0.0.0.0",
                    help="local IPv4 address to send from (default: any)")
    ap.add_argument("--then-receive-distribute", type=int, default=None, metavar="SEQ")
    ap.add_argument("--expect-distribute", default=None)
    ap.add_argument("--main-server", action="store_true")
    ap.add_argument("--expect-copies", type=int, default=None)
    ap.add_argument("--final", action="store_true")
    ap.add_argument("--retry-store-full", action="store_true",
                    help="send again on NACK store_full instead of failing")
    ap.add_argument("--expect-ack", action="store_true")
    ap.add_argument("--fetch", type=int, default=None, metavar="NODE")
    ap.add_argument("--release", action="store_true")
    ap.add_argument("--receive-final", action="store_true")
    ap.add_argument("--linger", type=float, default=1.0)
    ap.add_argument("--node", type=int, default=0)
    ap.add_argument("--incarnation", type=lambda s: int(s, 0), default=None,
                    help="this process's run (default: one per job id)")
    a = ap.parse_args()
    global INCARNATION
    INCARNATION = a.incarnation if a.incarnation is not None else \
        ((a.job * 2654435761) & 0xFFFFFFFF) | 1
    if a.fetch is not None:
        return fetch(a)
    if a.main_server:
        return receive_final(a) if a.receive_final else main_server(a)
    sock = bind(a, 40000 + a.node)
    deadline = time.monotonic() + a.timeout
    for seq in range(a.seq, a.seq + a.chunks):
        rc = contribute(a, sock, seq, deadline)
        if rc != 0:
            return rc
    if a.then_receive_distribute is None:
        return 0
    return receive_distribute(a, sock, deadline)


def contribute(a, sock, seq, deadline):
    """Sends --values as chunk `seq` until its result (or ACK) comes."""
    values = [int(v) for v in a.values.split(",")]
    expect = [int(v) for v in a.expect.split(",")] if a.expect else []
    payload = struct.pack("<%di" % len(values), *values)
    task_info = FLAG_TASK_INFO if a.task_info else 0
    expected, node_count = (a.members, 1) if a.task_info else (0, 0)
    final = FLAG_FINAL if a.final else 0
    flags = task_info | final
    while time.monotonic() < deadline:
        header = HEADER.pack(MAGIC, VERSION, CONTRIBUTION, flags, a.node, a.job, seq, a.key,
                             0, 0, expected, node_count, 0xFFFF, len(values), 0, 0, 0, 0, 0, INCARNATION)
        sock.sendto(header + payload, (a.switch, a.port))
        flags = task_info | final | FLAG_RETRANSMISSION
        got = receive(sock)
        if got is None:
            continue
        h, data, peer = got
        magic, version, opcode, job, count = h[0], h[1], h[2], h[5], h[13]
        if opcode == NACK and job == a.job and h[6] == seq:
            reason = h[18]
            if a.retry_store_full and reason == NACK_STORE_FULL:
                continue  # "not now", as the client library takes it: sent again
            print("node %d: NACK: %s (%d)" % (a.node, NACK_REASONS.get(reason, "?"), reason),
                  file=sys.stderr)
            return 3
        if a.expect_ack and opcode == ACK and job == a.job and h[6] == seq:
            print("node %d: ACK: kept" % a.node)
            return 0
        if (magic != MAGIC or version != VERSION or opcode != RESULT or job != a.job or h[6] != seq
                or h[19] != INCARNATION):
            continue
        got = list(struct.unpack_from("<%di" % count, data, HEADER.size))
        print("node %d: result %s of %d from %s:%d" % (a.node, got, seq, peer[0], peer[1]))
        return 0 if got == expect else 1
    print("node %d: no result within %.1f s" % (a.node, a.timeout), file=sys.stderr)
    return 2


def receive_distribute(a, sock, deadline):
    """Waits for the DISTRIBUTE of --then-receive-distribute on `sock`."""
    want = [int(v) for v in a.expect_distribute.split(",")]
    while time.monotonic() < deadline:
        got = receive(sock)
        if got is None:
            continue
        h, data, peer = got
        if h[2] != DISTRIBUTE or h[5] != a.job or h[6] != a.then_receive_distribute:
            continue
        got = list(struct.unpack_from("<%di" % h[13], data, HEADER.size))
        print("node %d: distribution %s (key %d, aux %d) from %s:%d"
              % (a.node, got, h[7], h[18], peer[0], peer[1]))
        return 0 if got == want and h[7] == 0 else 1
    print("node %d: no distribution within %.1f s" % (a.node, a.timeout), file=sys.stderr)
    return 2


def bind(a, default_port):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((a.bind_address, a.bind_port if a.bind_port is not None else default_port))
    sock.settimeout(0.2)
    return sock


def fetch(a):
    """Asks for the contribution member --fetch sent to --seq."""
    want = [int(v) for v in a.expect.split(",")] if a.expect else []
    sock = bind(a, 40000 + a.node)
    deadline = time.monotonic() + a.timeout
    flags = FLAG_RELEASE if a.release else 0
    while time.monotonic() < deadline:
        header = HEADER.pack(MAGIC, VERSION, FETCH, flags, a.node, a.job, a.seq, a.key,
                             0, 0, 0, 0, 0xFFFF, 0, 0, 0, 0, 0, a.fetch, INCARNATION)
        sock.sendto(header, (a.switch, a.port))
        got = receive(sock)
        if got is None:
            continue
        h, data, peer = got
        if h[5] != a.job or h[6] != a.seq:
            continue
        if h[2] == NACK:
            print("fetch %d of %d: NACK: %s (%d)" % (a.fetch, a.seq, NACK_REASONS.get(h[18], "?"), h[18]),
                  file=sys.stderr)
            return 3
        if h[2] != FETCH or h[18] != a.fetch:
            continue
        got = list(struct.unpack_from("<%di" % h[13], data, HEADER.size))
        print("fetch %d of %d: %s (key %d) from %s:%d" % (a.fetch, a.seq, got, h[7], peer[0], peer[1]))
        return 0 if got == want and h[7] == 0 else 1
    print("fetch %d of %d: no answer within %.1f s" % (a.fetch, a.seq, a.timeout), file=sys.stderr)
    return 2


def receive_final(a):
    """Waits for the final result of --seq and ACKs each copy of it."""
    want = [int(v) for v in a.expect.split(",")] if a.expect else []
    sock = bind(a, 45000)
    deadline = time.monotonic() + a.timeout
    copies, good, last, seen = 0, None, None, set()
    wanted = set(range(a.seq, a.seq + a.chunks))
    while time.monotonic() < deadline:
        if seen == wanted and time.monotonic() - last > a.linger:
            break
        got = receive(sock)
        if got is None:
            continue
        h, data, peer = got
        if h[2] != RESULT or not h[3] & FLAG_FINAL or h[5] != a.job or h[6] not in wanted:
            continue
        seen.add(h[6])
        copies += 1
        last = time.monotonic()
        values = list(struct.unpack_from("<%di" % h[13], data, HEADER.size))
        good = values == want if good is None else good and values == want
        # Echoing aux (the worker that keeps it) and the delivery's run label.
        ack = HEADER.pack(MAGIC, VERSION, ACK, FLAG_FINAL, 0, a.job, h[6], a.key,
                          0, 0, 0, 0, 0xFFFF, 0, 0, 0, 0, 0, h[18], h[19])
        sock.sendto(ack, peer)
    if seen != wanted:
        print("main server: final results of %d of %d chunks within %.1f s"
              % (len(seen), len(wanted), a.timeout), file=sys.stderr)
        return 2
    print("main server: %d final results, each %s, %d copies ACKed" % (len(seen), values, copies))
    return 0 if good else 1


def main_server(a):
    """Sends --values as a DISTRIBUTE and waits for the ACK."""
    values = [int(v) for v in a.values.split(",")]
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", a.bind_port if a.bind_port is not None else 45000))
    sock.settimeout(0.2)
    payload = struct.pack("<%di" % len(values), *values)
    deadline = time.monotonic() + a.timeout
    unbound = 0
    while time.monotonic() < deadline:
        header = HEADER.pack(MAGIC, VERSION, DISTRIBUTE, 0, 0, a.job, a.seq, a.key,
                             0, 0, 0, 0, 0xFFFF, len(values), 0, 0, 0, 0, 7, INCARNATION)
        sock.sendto(header + payload, (a.switch, a.port))
        got = receive(sock)
        if got is None:
            continue
        h = got[0]
        if h[5] != a.job or h[6] != a.seq:
            continue
        if h[2] == NACK:
            reason = h[18]
            if reason == NACK_MEMBERS_UNBOUND:
                unbound += 1
                time.sleep(0.2)
                continue
            print("main server: NACK: %s (%d)" % (NACK_REASONS.get(reason, "?"), reason),
                  file=sys.stderr)
            return 3
        if h[2] == ACK:
            print("main server: ACK, %d copies (after %d NACKs members unbound)" % (h[18], unbound))
            return 0 if a.expect_copies is None or h[18] == a.expect_copies else 1
    print("main server: no ACK within %.1f s (%d NACKs members unbound)" % (a.timeout, unbound),
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
