#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz (corpus/<harness>/): small,
meaningful inputs each harness starts from. Standard library only.

    tests/fuzz/make_corpus.py          # rewrites the generated seeds

Seeds are named by what they are; files this script does not write are left
alone. config_fuzz also
reads config/examples/*.yaml directly (run_fuzz.sh), so those are not copied.
Regression inputs (regress-*) live in the corpora too: the one below is
written here, those of later findings are added by hand.
The wire format is docs/protocol.md's; the frame layout that of
dataplane/net_headers.h; the input formats those of each harness's header
comment.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# --- the aggregation header (docs/protocol.md) ---
MAGIC, VERSION = 0xA65C, 2
CONTRIBUTION, PARTIAL, RESULT, LATE, VERIFY, EXC_RETRANSMIT, TASK_INFO, ACK, NACK, NOTICE = range(1, 11)
DISTRIBUTE, FETCH = 12, 13
INT32, FLOAT32, FLOAT16, BFLOAT16, BOOL = range(5)
SUM, MIN, MAX, AND, OR = range(5)
F_BYPASS, F_OVERFLOW, F_INCOMPLETE, F_TASK_INFO, F_ORDERED = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
F_RELEASE, F_FINAL = 1 << 10, 1 << 11
ELEM = {INT32: 4, FLOAT32: 4, FLOAT16: 2, BFLOAT16: 2, BOOL: 1}


def agg(opcode, payload=b"", dtype=INT32, op=SUM, flags=0, node=0, job=7, seq=0, key=0xDEC0,
        ack=0, expected=0, node_count=0, slot_hint=0xFFFF, scale=0, missing=(), aux=0,
        elem_count=None, incarnation=0x1ee7):
    if elem_count is None:
        elem_count = len(payload) // ELEM[dtype]
    hdr = struct.pack(">HBBHHIIQIIHHHHBBbBII", MAGIC, VERSION, opcode, flags, node, job, seq, key,
                      ack, 0, expected, node_count, slot_hint, elem_count, dtype, op, scale,
                      len(missing), aux, incarnation)
    assert len(hdr) == 52
    return hdr + b"".join(struct.pack(">H", m) for m in missing) + payload


def i32(*v):
    return struct.pack("<%di" % len(v), *v)


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def f16(*v):
    return struct.pack("<%de" % len(v), *v)


# --- frames (dataplane/net_headers.h) ---
SWITCH_MAC = bytes.fromhex("02a99c000001")  # config/examples/default.yaml
HOST_MAC = bytes.fromhex("020000000a0a")
BROADCAST = b"\xff" * 6


def ip4(text):
    return bytes(int(x) for x in text.split("."))


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return struct.pack("!H", ~s & 0xFFFF)


def eth(dst, src, ether_type, body, vlan=None):
    tag = b"" if vlan is None else struct.pack("!HH", 0x8100, vlan)
    return dst + src + tag + struct.pack("!H", ether_type) + body


def ipv4(src, dst, proto, body, frag=0x4000, options=b"", ttl=64):
    ihl = 5 + len(options) // 4
    hdr = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, 4 * ihl + len(body), 0x1234, frag, ttl, proto,
                      0, ip4(src), ip4(dst)) + options
    return hdr[:10] + checksum(hdr) + hdr[12:] + body


def udp(sport, dport, payload):
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


def icmp_echo(ident, seq, data):
    msg = struct.pack("!BBHHH", 8, 0, 0, ident, seq) + data
    return msg[:2] + checksum(msg) + msg[4:]


def arp_request(sha, spa, tpa):
    return struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, sha, ip4(spa), b"\0" * 6, ip4(tpa))


def arp_reply(sha, spa, tha, tpa):
    return struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 2, sha, ip4(spa), tha, ip4(tpa))


def pad(frame):
    return frame + b"\0" * max(0, 60 - len(frame))


def wire_seeds():
    v = i32(1, -2, 3, 2**31 - 1)
    return {
        "contribution-int32-sum": agg(CONTRIBUTION, v, node=2, seq=42, aux=128),
        "contribution-float32-ordered": agg(CONTRIBUTION, f32(1.5, -0.25, 3e38), dtype=FLOAT32,
                                            flags=F_ORDERED, node=1),
        "contribution-float16-max": agg(CONTRIBUTION, f16(1.0, -2.0, 65504.0), dtype=FLOAT16, op=MAX),
        "contribution-bfloat16-min": agg(CONTRIBUTION, b"\x80\x3f\x00\xc0", dtype=BFLOAT16, op=MIN),
        "contribution-bool-or": agg(CONTRIBUTION, b"\x00\x01\x01\x00", dtype=BOOL, op=OR),
        "contribution-int32-and-padded": agg(CONTRIBUTION, i32(-1, 0x0F0F), op=AND) + b"\0" * 14,
        "contribution-task-info": agg(CONTRIBUTION, v, flags=F_TASK_INFO, expected=4, node_count=1),
        "contribution-bypass": agg(CONTRIBUTION, v, flags=F_BYPASS, node=3),
        "partial-missing": agg(PARTIAL, v, node=100, missing=(2, 3)),
        "result-incomplete": agg(RESULT, v, flags=F_INCOMPLETE | F_OVERFLOW, node=0xFFFE, missing=(3,)),
        "late": agg(LATE, v, flags=F_BYPASS, node=3, missing=(5,)),
        "verify": agg(VERIFY, v),
        "exception-retransmit": agg(EXC_RETRANSMIT),
        "task-info": agg(TASK_INFO, expected=4, node_count=2, dtype=FLOAT32),
        "ack": agg(ACK, ack=99, seq=99, node=1),
        "nack-key-mismatch": agg(NACK, aux=2),
        "notice-self-flag": agg(NOTICE, aux=1, node=3),
        "distribute": agg(DISTRIBUTE, v, seq=9, aux=128),
        "fetch-release": agg(FETCH, flags=F_RELEASE, seq=9, node=1, aux=2),
        "contribution-final": agg(CONTRIBUTION, v, flags=F_FINAL, node=2),
        "bad-truncated": agg(ACK)[:47],
        "bad-count-mismatch": agg(CONTRIBUTION, v)[:-1],
        "bad-type-op": agg(CONTRIBUTION, b"\x01", dtype=BOOL, op=SUM),
    }


def frame_seeds():
    # Ports of the embedded default: 0, 1, 3 access VLAN 10; 2 trunk [10, 20].
    host, sw, sw20 = "10.0.10.10", "10.0.10.254", "10.0.20.254"
    datagram = agg(CONTRIBUTION, i32(1, 2, 3, 4), node=0)
    echo = icmp_echo(0x77, 1, b"abcdefgh" * 4)
    return {
        "port0-agg-contribution": b"\x00" + eth(SWITCH_MAC, HOST_MAC, 0x0800,
                                                ipv4(host, sw, 17, udp(40000, 47000, datagram))),
        "port2-vlan20-agg-task-info": b"\x02" + eth(SWITCH_MAC, HOST_MAC, 0x0800,
                                                    ipv4("10.0.20.10", sw20, 17,
                                                         udp(40001, 47000, agg(TASK_INFO, expected=2))),
                                                    vlan=20),
        "port0-agg-distribute": b"\x00" + eth(SWITCH_MAC, HOST_MAC, 0x0800,
                                               ipv4(host, sw, 17, udp(45000, 47000,
                                                                      agg(DISTRIBUTE, i32(7, 8), seq=9)))),
        "port0-agg-fetch": b"\x00" + eth(SWITCH_MAC, HOST_MAC, 0x0800,
                                          ipv4(host, sw, 17, udp(40000, 47000,
                                                                 agg(FETCH, seq=1, aux=0)))),
        "port0-priority-tag-udp": b"\x00" + eth(SWITCH_MAC, HOST_MAC, 0x0800,
                                                ipv4(host, "10.0.10.11", 17, udp(5000, 5001, b"hi")),
                                                vlan=0),
        "port0-udp-padded": b"\x00" + pad(eth(BROADCAST, HOST_MAC, 0x0800,
                                              ipv4(host, "10.0.10.255", 17, udp(68, 67, b"x")))),
        "port0-arp-request-broadcast": b"\x00" + pad(eth(BROADCAST, HOST_MAC, 0x0806,
                                                         arp_request(HOST_MAC, host, sw))),
        "port2-vlan20-arp-request": b"\x02" + pad(eth(BROADCAST, HOST_MAC, 0x0806,
                                                      arp_request(HOST_MAC, "10.0.20.10", sw20), vlan=20)),
        "port1-arp-reply-to-switch": b"\x01" + pad(eth(SWITCH_MAC, HOST_MAC, 0x0806,
                                                       arp_reply(HOST_MAC, host, SWITCH_MAC, sw))),
        "port0-icmp-echo": b"\x00" + eth(SWITCH_MAC, HOST_MAC, 0x0800, ipv4(host, sw, 1, echo)),
        "port2-vlan10-icmp-echo": b"\x02" + eth(SWITCH_MAC, HOST_MAC, 0x0800, ipv4(host, sw, 1, echo),
                                                vlan=10),
        "port0-icmp-echo-ip-options": b"\x00" + eth(SWITCH_MAC, HOST_MAC, 0x0800,
                                                    ipv4(host, sw, 1, echo, options=b"\x01\x01\x01\x00")),
        "port0-udp-fragment": b"\x00" + eth(SWITCH_MAC, HOST_MAC, 0x0800,
                                            ipv4(host, sw, 17, udp(40000, 47000, datagram), frag=0x2000)),
        "port0-runt": b"\x00" + SWITCH_MAC + HOST_MAC,
        "port2-vlan4095": b"\x02" + pad(eth(BROADCAST, HOST_MAC, 0x0806, b"", vlan=4095)),
    }


# tan_fuzz: option byte, then (control byte, 16-bit length, datagram) records.
ROOT_A, ROOT_B, WORKER, CHILD = 0 << 3, 1 << 3, 2 << 3, 3 << 3
T0, T1US, T1MS, T10MS, THALF, TGIVEUP, TGIVEUP1, T3GIVEUP = range(8)
OWN, TWICE = 1 << 6, 1 << 7


def rec(ctl, datagram):
    return bytes([ctl]) + struct.pack(">H", len(datagram)) + datagram


def tan_seeds():
    v = i32(10, 20, 30, 40)
    late2 = agg(LATE, i32(1, 2, 3, 4), flags=F_BYPASS, node=2)
    return {
        # First data missing node 2, then its late data: a complete RESULT.
        "incremental-first-then-late": b"\x00" + rec(T0 | ROOT_A, agg(PARTIAL, v, node=100, missing=(2,)))
        + rec(T1MS | ROOT_A, late2),
        # The late data first, held until its first data comes.
        "batch-late-before-first": b"\x01" + rec(T0 | ROOT_A, late2)
        + rec(T1MS | ROOT_A, agg(PARTIAL, v, node=100, missing=(2,))),
        # Nobody comes: an INCOMPLETE RESULT at the give-up, then a repeated
        # first data gets the cached answer, and a late one is too late.
        "give-up-then-repeat": b"\x00" + rec(T0 | ROOT_A, agg(PARTIAL, v, missing=(2, 3)))
        + rec(TGIVEUP1 | ROOT_A, agg(PARTIAL, v, missing=(2, 3)))
        + rec(T1MS | WORKER, agg(LATE, v, flags=F_BYPASS, node=3)),
        # Ordered floats: batch, reduced in node order.
        "ordered-float32": b"\x00" + rec(T0 | ROOT_A, agg(PARTIAL, f32(0.1, 0.2), dtype=FLOAT32,
                                                          flags=F_ORDERED, missing=(4, 1)))
        + rec(T1US | WORKER, agg(LATE, f32(1e8, -1e8), dtype=FLOAT32, flags=F_BYPASS, node=4))
        + rec(T1US | WORKER, agg(LATE, f32(3.0, 4.0), dtype=FLOAT32, flags=F_BYPASS, node=1)),
        # A self-flagged worker's BYPASS contribution, and a duplicate of it.
        "bypass-contribution-twice": b"\x00" + rec(T0 | ROOT_A, agg(PARTIAL, v, missing=(5, 6)))
        + rec(T10MS | WORKER | TWICE, agg(CONTRIBUTION, v, flags=F_BYPASS, node=5)),
        # --covers 7:100=0-3: switch 100's late partial, itself missing 3,
        # resolves 0-2; node 3's own late then completes the chunk.
        "covers-nested-missing": b"\x04" + rec(T0 | ROOT_A, agg(PARTIAL, v, node=200,
                                                                missing=(100,)))
        + rec(T1MS | CHILD, agg(LATE, v, flags=F_BYPASS, node=100, missing=(3,)))
        + rec(T1MS | WORKER, agg(LATE, v, flags=F_BYPASS, node=3)),
        # --sgd 7=0.5: a parameter-server chunk, complete at once (no missing list).
        "sgd-parameter-server": b"\x02" + rec(T0 | ROOT_A, agg(PARTIAL, f32(1.0, 2.0, -4.0),
                                                               dtype=FLOAT32, aux=8))
        + rec(T1MS | ROOT_A, agg(PARTIAL, f32(1.0, 2.0, -4.0), dtype=FLOAT32, seq=1, aux=8)),
        # The TAN's own worker (node 2) is late: its contribution is taken locally.
        "own-worker-late": b"\x80" + rec(T0 | ROOT_A, agg(PARTIAL, v, missing=(2,)))
        + rec(T1MS | OWN, agg(CONTRIBUTION, i32(1, 1, 1, 1), node=2))
        + rec(T1MS | OWN, agg(CONTRIBUTION, i32(1, 1, 1, 1), node=2)),
        # A full engine (max_pending 2, max_held_lates 1), two roots, a wrong key.
        "limits-and-key-mismatch": b"\x78" + rec(T0 | ROOT_A, agg(PARTIAL, v, seq=1, missing=(1,)))
        + rec(T0 | ROOT_B, agg(PARTIAL, v, seq=2, missing=(1,)))
        + rec(T0 | ROOT_A, agg(PARTIAL, v, seq=3, missing=(1,)))
        + rec(T0 | WORKER, agg(LATE, v, flags=F_BYPASS, node=1, seq=1, key=0xBAD))
        + rec(T0 | WORKER, agg(LATE, v, flags=F_BYPASS, node=1, seq=9)),
    }


# client_fuzz: option byte, then (control byte, 16-bit length, datagram)
# records; the harness answers each datagram the client sends with the next.
C_REPAIR, C_JOB, C_SEQ, C_NODE = 1, 2, 4, 8
C_RESULT, C_NACK, C_NOTICE = 1 << 4, 2 << 4, 3 << 4
C_STRANGER, C_AND_TRUE = 1 << 6, 1 << 7
FIX = C_REPAIR | C_JOB | C_SEQ | C_NODE


def client_seeds():
    chunk = i32(*range(8))
    return {
        # Every datagram answered truly: the allreduce completes exactly.
        "int32-sum-clean": b"\x00",
        "float32-fixed-point-clean": b"\x01",
        "float32-ordered-clean": b"\x02",
        "int32-max-announced-clean": b"\x07",
        # A result from a stranger first (ignored), then the true one.
        "stranger-result": b"\x00" + rec(FIX | C_RESULT | C_STRANGER | C_AND_TRUE,
                                          agg(RESULT, chunk, key=0)),
        # "Not now" NACKs (rate limited, slot quota, hold quota, member
        # bound): retried, then answered.
        "transient-nacks": b"\x00" + b"".join(rec(FIX | C_NACK, agg(NACK, aux=r)) for r in (7, 9, 10, 11)),
        # A NACK that ends the allreduce (key mismatch), and table full.
        "nack-key-mismatch": b"\x00" + rec(FIX | C_NACK, agg(NACK, aux=2)),
        "nack-in-band-full": b"\x04" + rec(FIX | C_NACK, agg(NACK, aux=8)),
        # A NOTICE to flag data, a result with the wrong element count, an
        # INCOMPLETE one with a missing list, a duplicate.
        "notice-self-flag": b"\x00" + rec(FIX | C_NOTICE | C_AND_TRUE, agg(NOTICE, aux=1)),
        "result-wrong-count": b"\x00" + rec(FIX | C_RESULT, agg(RESULT, i32(1, 2, 3), key=0)),
        "result-incomplete": b"\x00" + rec(FIX | C_RESULT, agg(RESULT, chunk, key=0,
                                                              flags=F_INCOMPLETE, missing=(3,))),
        "result-twice": b"\x02" + rec(C_AND_TRUE | FIX | C_RESULT,
                                       agg(RESULT, f32(*([0.5] * 8)), dtype=FLOAT32, key=0)),
        # Bytes that are no aggregation packet at all.
        "garbage": b"\x00" + rec(0, b"\xa6\x5c\x01") + rec(C_AND_TRUE, b"\x00" * 60),
    }


def api_seeds():
    job = ('{"id": 9, "key": "0xdec0", "members": 3, "node_ids": ["0-1"], '
           '"switches": [{"node": 100, "covers": [2, 3]}], "ordered": true, "timeout_ms": 20, '
           '"trigger": "batch", "tan": {"strategy": "fewest_hops", "candidates": '
           '[{"address": "10.0.9.50", "port": 47000, "hops": 2}]}, "tan_member": 0}')
    return {
        "get-metrics": "GET /metrics\n",
        "get-ports": "GET /api/v1/ports\n",
        "get-mac-filtered": "GET /api/v1/mac?vlan=10&port=uplink\n",
        "get-mac-bad-vlan": "GET /api/v1/mac?vlan=4095\n",
        "get-lcores": "GET /api/v1/lcores\n",
        "get-stats": "GET /api/v1/stats\n",
        "get-slots": "GET /api/v1/slots?limit=2&job=1\n",
        "get-bypass": "GET /api/v1/bypass?job=7&limit=1\n",
        "get-jobs": "GET /api/v1/jobs\n",
        "post-job": "POST /api/v1/jobs\n" + job,
        "post-job-upstream": 'POST /api/v1/jobs\n{"id": 11, "key": 5, "members": 2, '
                             '"upstream": {"address": "10.0.9.1", "node": 3}, "parameter_server": false}',
        "post-job-exists": 'POST /api/v1/jobs\n{"id": 7, "key": 1, "members": 2}',
        "post-job-table-full": 'POST /api/v1/jobs\n{"id": 14, "key": 1, "members": 2}',
        "post-job-bad-key": 'POST /api/v1/jobs\n{"id": 9, "key": [1, {"a": null}], "members": 2}',
        "get-job": "GET /api/v1/jobs/1\n",
        "get-job-unknown": "GET /api/v1/jobs/3\n",
        "delete-job": "DELETE /api/v1/jobs/7\n",
        "delete-member": "DELETE /api/v1/jobs/7/members/1\n",
        "delete-member-unknown": "DELETE /api/v1/jobs/1/members/9\n",
        "get-stragglers": "GET /api/v1/jobs/7/stragglers?top=2&ops=50\n",
        "post-stragglers-apply": 'POST /api/v1/jobs/7/stragglers\n{"over": 0.001, "apply": true}',
        "post-stragglers-clear": 'POST /api/v1/jobs/1/stragglers\n{"clear": true}',
        "get-tan": "GET /api/v1/jobs/1/tan\n",
        "post-tan-choice": 'POST /api/v1/jobs/1/tan\n{"strategy": "least_load", "candidates": '
                           '[{"address": "10.0.9.50"}, {"address": "10.0.9.51", "port": 47001}]}',
        "post-tan-member": 'POST /api/v1/jobs/7/tan\n{"member": 5}',
        "post-tan-self": 'POST /api/v1/jobs/1/tan\n{"strategy": "self", "member": null}',
        "get-int": "GET /api/v1/int\n",
        "put-int-watch": 'PUT /api/v1/int\n{"watch": [{"name": "g", "vlan": 10, "src": "10.0.0.0/8", '
                         '"dst": "10.1.2.0/24", "port": 5000, "job": 7, "sample": 100, '
                         '"instructions": "both"}]}',
        "put-int-refused": 'PUT /api/v1/int\n{"watch": [{"name": "x", "vlan": 99}]}',
        "get-int-decisions": "GET /api/v1/int/decisions\n",
        "put-int-decisions": 'PUT /api/v1/int/decisions\n{"decisions": [{"dst": "10.0.80.2/32", "port": "s2"}, '
                             '{"dst": "10.0.81.0/24", "port": 1}]}',
        "put-int-decisions-refused": 'PUT /api/v1/int/decisions\n{"decisions": [{"dst": "10.0.80.2/32", "port": "s9"}]}',
        "put-ports-405": "PUT /api/v1/ports\n",
        "get-unknown-404": "GET /api/v2/nothing\n",
    }


def config_seeds():
    return {
        "minimal": "ports:\n  - {name: p0, devargs: net_null0, access: 10}\n",
        "aggregation-tree": """\
switch: {mac: 02:00:00:00:00:01, addresses: [10.0.10.1/24]}
ports:
  - {name: up, devargs: net_null0, trunk: [10, 20], native: 10}
  - {name: h0, devargs: net_null1, access: 10}
aggregation:
  address: 10.0.10.254
  jobs:
    - id: 7
      key: 0xdec0
      node_ids: [0-1]
      switches: [{node: 100, covers: [2, 3]}]
      upstream: {address: 10.0.9.1, node: 3}
      tan: {strategy: fixed, candidates: [{address: 10.0.9.50}]}
""",
        "groups-and-main-server": """\
switch: {mac: 02:00:00:00:00:01, addresses: [10.0.10.1/24]}
ports:
  - {name: h0, devargs: net_null0, access: 10}
  - {name: s1, devargs: net_null1, access: 10, role: fabric, group: up}
  - {name: s2, devargs: net_null2, access: 10, role: fabric, group: up}
aggregation:
  address: 10.0.10.254
  jobs: [{id: 5, key: 0x5eed, members: 2, main_server: "10.0.10.100:45000"}]
""",
        "store-modes": """\
ports: [{name: p0, devargs: net_null0, access: 10}]
aggregation:
  state_file: /var/lib/aggswitch/jobs.json
  address: 10.0.10.254
  store: {buffers: 64, per_job: 16, final_timeout_ms: 2000}
  jobs:
    - {id: 5, key: 0x5eed, members: 2, mode: store}
    - {id: 6, key: 0x5eed, members: 2, mode: both, main_server: 10.0.10.100}
""",
        "anchors": "ports:\n  - &p {name: p0, devargs: net_null0, access: 10}\n  - <<: *p\n    name: p1\n",
        "errors-unknown-key": "ports: []\nswitch: {mac: zz}\nbogus: 1\n",
    }


def int_seeds():
    # docs/telemetry.md: shim (INT-MD, NPT 1, length, original port), INT-MD
    # header (version 2, Hop ML 4, 8 hops, latency set, domain 0x4147, path
    # id instruction), one hop's metadata, the path id; and a hop's report.
    md = struct.pack("!BBHBBBBHHHH", 0x14, 9, 47000, 0x20, 0, 4, 7, 0xF000, 0x4147, 0x8000, 0)
    hop = struct.pack("!IHHII", 1, 1, 2, 1500, 3)
    path_id = struct.pack("!II", 1, 42)
    inner = ipv4("10.0.0.1", "10.0.0.2", 17, udp(5000, 47000, b""))[:28]
    metadata = struct.pack("!HHII", 1, 2, 1500, 3) + path_id + struct.pack("!I", 2)
    body = struct.pack("!HHHH", 0x7000, 0x4147, 0xC000, 0) + metadata + inner
    report = (struct.pack("!II", (2 << 28) | 5, 2) +
              struct.pack("!BBBB", 0x14, len(body) // 4, len(metadata) // 4, 0x30) + body)
    return {
        "int-first-hop": b"\x00" + bytes([0x14, 5]) + md[2:] + path_id + b"payload",
        "int-one-hop": b"\x00" + md + hop + path_id + b"payload",
        "report-transit": b"\x01" + report,
        # A datagram's payload at a transit hop: 5 of a budget of 8 hops left.
        "frame-transit": b"\x02" + bytes([0x14, 5]) + struct.pack(
            "!HBBBBHHHH", 47000, 0x20, 0, 4, 5, 0xF000, 0x4147, 0x8000, 8) + path_id + b"payload",
    }


def int_report(node, seq, last, path_id, hop_index):
    """A hop's Telemetry Report as a switch sends it (docs/telemetry.md):
    ports, latency and queue, aggswitch's path id and hop index, the
    datagram's IPv4 and UDP headers."""
    inner = ipv4("10.0.0.1", "10.0.0.2", 17, udp(5000, 47000, b""))[:28]
    metadata = struct.pack("!HHII", 1, 2, 1500, 3) + struct.pack("!III", *path_id, hop_index)
    body = struct.pack("!HHHH", 0x7000, 0x4147, 0xC000, 0) + metadata + inner
    flags = 0x20 if last else 0x30
    return (struct.pack("!II", (2 << 28) | (seq & 0x3FFFFF), node) +
            struct.pack("!BBBB", 0x14, len(body) // 4, len(metadata) // 4, flags) + body)


def intcollector_seeds():
    # Byte 0 the row cap (>= 128: none), then per datagram the sender
    # (10.0.0.x) and a 16-bit length (tests/fuzz/intcollector_fuzz.cc).
    # Node n reports from 10.0.0.n.
    def datagrams(*items):
        out = b""
        for sender, report in items:
            out += bytes([sender]) + struct.pack("!H", len(report)) + report
        return out

    def path(first_seq, path_seq, nodes=(1, 2, 3)):
        return [(n, int_report(n, first_seq, i + 1 == len(nodes), (1, path_seq), i + 1))
                for i, n in enumerate(nodes)]

    # A path's reports again and again: one row per hop (the flood that
    # stopped the collector was 2,000 copies of one 3-hop path).
    repeats = [item for k in range(40) for item in path(k, 7)]
    forged = [(5, int_report(1, 0, True, (1, 8), 1)), (1, int_report(9, 0, True, (9, 1), 1))]
    return {
        "paths": b"\xff" + datagrams(*path(0, 1), *path(1, 2)),
        "duplicate-path": b"\xff" + datagrams(*repeats),
        "duplicate-path-capped": b"\x04" + datagrams(*repeats, *path(40, 9)),
        "forged-senders": b"\xff" + datagrams(*forged, *path(0, 3)),
        "sequence-gap": b"\xff" + datagrams((1, int_report(1, 5, True, (1, 4), 1)),
                                             (1, int_report(1, 4000000, True, (1, 5), 1))),
    }


def cache_seeds():
    # The first byte picks the parser (tests/fuzz/cache_fuzz.cc).
    daemon = ("cache:\n  node: n1\n  nodes: [n1, n2]\n  listen: 10.0.0.1:7400\n  memory: 64MiB\n"
              "  store: http://10.0.0.9:8000/ds\n  dataset: ds\n  records: etcd://10.0.0.5:2379\n"
              "  replicas: 2\n  allow: {nodes: [10.0.0.0/24], jobs: [train]}\n")
    loader = ("loader:\n  records: file:/tmp/r.json\n  dataset: ds\n  job: train\n  node: n1\n"
              "  store: /data\n  miss: read_through\n  request: {amount: 8MiB, component: gpu}\n")
    item = ('{"item":"a/b.bin","length":4096,"version":7,"crc32c":3735928559,"owner":"n1",'
            '"holders":[{"node":"n1","addr":139637976727616,"rkey":5},{"node":"n2","addr":64,"rkey":9}]}')
    node = ('{"node":"n1","ucx_listen":"10.0.0.1:7400","region_path":"/dev/shm/aggswitch-cache.n1",'
            '"region_base":139637976727552,"region_size":67108864,"rkey":5,"pid":42,"members":["n1","n2"]}')
    return {
        "daemon": b"\x00" + daemon.encode(),
        "daemon-aliases": b"\x00" + (daemon + "  x: &a [n1, n1]\n").encode(),
        "loader": b"\x01" + loader.encode(),
        "manifest": b"\x02" + b"# comment\ntrain/0.bin 10\ntrain/1.bin 0\n",
        "item-record": b"\x03" + item.encode(),
        "node-record": b"\x04" + node.encode(),
        # cache/ucx_transport.h's structs, little-endian: a hello for job
        # "train", a fill request, an accepted reply with its key, and a
        # holder's address inside a 64 MiB region (addr, length, base, size).
        "hello": b"\x05" + struct.pack("<II", 0x41474843, 5) + b"train",
        "fill": b"\x06" + b"train/0.bin",
        "hello-reply": b"\x07" + struct.pack("<iIQQII", 0, 5, 0x7f0000000000, 64 << 20, 10, 0) + b"packed-key",
        "holder": b"\x08" + struct.pack("<QQQQ", 0x7f0000000040, 4096, 0x7f0000000000, 64 << 20),
    }


def write(harness, seeds):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        if isinstance(data, str):
            data = data.encode()
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


def main():
    write("wire_fuzz", wire_seeds())
    write("frame_fuzz", frame_seeds())
    write("tan_fuzz", tan_seeds())
    write("api_fuzz", api_seeds())
    write("client_fuzz", client_seeds())
    write("config_fuzz", config_seeds())
    write("int_fuzz", int_seeds())
    write("intcollector_fuzz", intcollector_seeds())
    write("cache_fuzz", cache_seeds())
    # A node record whose region_base no uint64 holds: nlohmann converted the
    # double, undefined behaviour (cache_fuzz found it).
    write("cache_fuzz", {
        "regress-node-record-1e20": b"\x04" + b'{"node":"n1","ucx_listen":"10.0.0.1:7400","region_path":"/x",'
                                    b'"region_base":139637976727553554432,"region_size":1,"rkey":6}',
    })
    # A 572-byte config whose node id ranges expanded to 2.6 million ids, a
    # location recorded for each: over 10 s and 550 MB under ASan (config
    # before 69185db); now at most 65535 ids per job.
    write("config_fuzz", {
        "regress-node-id-ranges":
            "ports:\n  - {name: p0, devargs: net_null0, access: 10}\naggregation:\n"
            "  address: 10.0.10.254\n  jobs:\n    - {id: 1, key: 1, node_ids: ["
            + ", ".join(['"0-65534"'] * 40) + "]}\n",
    })
    # Requests that overflowed civetweb's 100 KB request stack: error
    # messages echoed the value with nlohmann's recursive dump().
    write("api_fuzz", {
        "regress-deep-nesting-dump": 'POST /api/v1/jobs\n{"id":' + "[" * 600 + "]" * 600 + "}",
        "regress-deep-nesting-key": 'POST /api/v1/jobs\n{"id": 9, "key": ' + '{"a":' * 2000 + "1"
                                    + "}" * 2000 + "}",
        # A number no double holds: nlohmann's out_of_range escaped the body
        # parser's parse_error handler and became a 500 (api_fuzz found it).
        "regress-number-overflow-500": "POST /api/v1/jobs\n1e400",
    })


if __name__ == "__main__":
    main()
