#!/usr/bin/env python3
"""Parsers and the summaries for bench/l2_forwarding.sh and bench/aggregation.sh
(python3 standard library only).

Every piece of text the benchmarks read from a switch or a generator goes
through one function here, so a format change in testpmd, OVS, aggswitch or
agg-gen is fixed in one place.

bench/l2_forwarding.sh:
  parse_stats.py telemetry PREFIX QUERY         raw JSON answer of a DPDK telemetry socket
  parse_stats.py sink-tx KIND FILE PORT         packets sent on PORT, from a snapshot
  parse_stats.py cycles KIND FILE...            busy cycles per packet over the window
  parse_stats.py gen-drops LOG                  share of its packets a txonly generator dropped
  parse_stats.py rates KIND RUN_DIR WINDOW       packets/s on the sink, once a second
  parse_stats.py summary RESULTS.tsv [options]  the human summary (see --help)

KIND is aggswitch (Prometheus text from /metrics), testpmd (telemetry JSON or
the testpmd log) or ovs (ovs-appctl output).

bench/aggregation.sh (cycles testpmd LOG as above):
  parse_stats.py agg-cycles BEGIN END           aggswitch busy cycles per packet, /api/v1/lcores
  parse_stats.py agg-counters BEGIN END         its aggregation counters' changes, "name value"
  parse_stats.py gen-rates GEN.json T0 T1       agg-gen's answered contributions/s, 1-s samples
  parse_stats.py gen-check GEN.json             "ok wrong_answers unanswered retransmits"
  parse_stats.py agg-summary RESULTS.tsv [...]  the human summary (see --help)

bench/allreduce.sh:
  parse_stats.py allreduce-run METHOD WORLD RANK.json... [--checks CHECK.json...]
                                                one run's "metric value" lines from its ranks
  parse_stats.py allreduce-verdict RESULTS.tsv --size B --method M --ratio R   PASS, MISS or n/a
  parse_stats.py allreduce-profile --run-dir DIR [...]   where an aggswitch run's CPU time went
  parse_stats.py allreduce-summary RESULTS.tsv [...]     the human summary
"""
import argparse
import json
import re
import socket
import statistics
import sys

# --- reading the DUTs -------------------------------------------------------


def telemetry(prefix, query):
    """Sends one query to a DPDK process's telemetry socket; returns the JSON text."""
    path = f"/var/run/dpdk/{prefix}/dpdk_telemetry.v2"
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(2)
        s.connect(path)
        hello = json.loads(s.recv(1024))
        s.send(query.encode())
        return s.recv(hello["max_output_len"]).decode()


def prom_value(text, series):
    """The value of one exact series, e.g. 'aggswitch_lcore_busy_cycles_total{lcore="1"}'."""
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name == series:
            return float(value)
    raise ValueError(f"no series {series} in the metrics")


def ovs_port_tx(text, port):
    """TX packets of `port` in `ovs-appctl dpctl/show -s` output."""
    m = re.search(r"^\s*port \d+: " + re.escape(port) + r"\b.*?\n(?:.*\n)*?\s*TX packets:(\d+)",
                  text, re.M)
    if not m:
        raise ValueError(f"no TX packets for port {port} in dpctl/show -s output")
    return int(m.group(1))


def sink_tx(kind, text, port):
    if kind == "aggswitch":
        return int(prom_value(text, f'aggswitch_port_tx_packets_total{{port="{port}"}}'))
    if kind == "testpmd":  # telemetry /ethdev/stats,<port id>
        return int(json.loads(text)["/ethdev/stats"]["opackets"])
    if kind == "ovs":
        return ovs_port_tx(text, port)
    raise ValueError(f"unknown kind {kind}")


def cycles(kind, files):
    """Busy cycles per packet over the measurement window."""
    texts = [open(f).read() for f in files]
    if kind == "aggswitch":  # two /metrics scrapes: window start and end
        begin, end = texts
        c = 'aggswitch_lcore_busy_cycles_total{lcore="1"}'
        p = 'aggswitch_lcore_busy_packets_total{lcore="1"}'
        packets = prom_value(end, p) - prom_value(begin, p)
        if packets <= 0:
            raise ValueError("aggswitch lcore 1 received no packets in the window")
        return (prom_value(end, c) - prom_value(begin, c)) / packets
    if kind == "testpmd":  # the log; the first report is `show fwd stats all` at window end
        m = re.search(r"CPU cycles/packet=(\S+)", texts[0])
        if not m:
            raise ValueError("no 'CPU cycles/packet=' in the testpmd log")
        if not re.fullmatch(r"[0-9.]+", m.group(1)):
            raise ValueError(f"testpmd reports CPU cycles/packet={m.group(1)}: no packets in the window")
        return float(m.group(1))
    if kind == "ovs":  # dpif-netdev/pmd-stats-show, cleared at window start
        m = re.search(r"avg processing cycles per packet: ([0-9.]+)", texts[0])
        if not m:
            raise ValueError("no 'avg processing cycles per packet' in pmd-stats-show output")
        return float(m.group(1))
    raise ValueError(f"unknown kind {kind}")


def gen_drops(log):
    """Packets a testpmd txonly generator sent and dropped (TX ring full), whole run."""
    blocks = re.findall(r"Accumulated forward statistics for all ports.*?\n.*?\n\s*"
                        r"TX-packets: (\d+)\s+TX-dropped: (\d+)", log)
    if not blocks:
        raise ValueError("no forward statistics in the generator log")
    sent, dropped = blocks[-1]
    return int(sent), int(dropped)


def rates(kind, run_dir, window):
    """Packets per second on the sink in each second of the window.

    aggswitch, ovs: run_dir/times has one "epoch-seconds sample-file" line per
    sample, the time taken right after the sample returned; the rate is the
    counter's change over the time between samples. testpmd: its log has one
    `show port stats 1` report per sample, each with Tx-pps since the previous
    report (the first report of the process has no previous one).
    """
    if kind == "testpmd":
        log = open(f"{run_dir}/dut.log", errors="replace").read()
        pps = [float(m.group(1)) for m in re.finditer(
            r"NIC statistics for port 1\b.*?Tx-pps:\s+(\d+)", log, re.S)]
        return pps[1:window + 1]
    samples = []
    for line in open(f"{run_dir}/times"):
        if line.strip():
            t, path = line.split()
            samples.append((float(t), sink_tx(kind, open(path).read(), "sink")))
    return [(c1 - c0) / (t1 - t0) for (t0, c0), (t1, c1) in zip(samples, samples[1:])]


# --- the summary ------------------------------------------------------------

DUT_LABELS = {"aggswitch": "aggswitch", "testpmd": "testpmd io", "ovs": "OVS-DPDK",
              "int_miss": "INT miss/1", "int_miss_1k": "INT miss/1k", "int_all_1k": "INT all/1k"}
# The in-band telemetry variants of aggswitch (bench/l2_forwarding.sh): what
# each costs over aggswitch alone, and which must stay within the target.
INT_VARIANTS = [
    ("int_miss", "watch list matching nothing, every frame matched", True),
    ("int_miss_1k", "watch list matching nothing, sample 1000 (countdown only)", True),
    ("int_all_1k", "every frame watched at 1 in 1000 (INT inserted, hop reported)", False),
]
INT_TARGET_CYCLES = 2.0   # per frame that matches no watch entry

# testpmd io over memif (copy mode) carries about 20-26 Mpps at 64 B when the
# machine is in its "fast" state and about 6 in its "slow" one
# (/work/shared/notes/benchmarking-on-this-machine.md). At 1024 B it carried
# 7.4-7.9 Mpps in the fast state; the slow figure there is assumed to be the
# same ~3x lower. A testpmd median above the threshold means fast. Sizes
# without a threshold are not classified.
STATE_THRESHOLD_MPPS = {64: 12.0, 1024: 5.0}

CYCLES_TARGET_64B = 100.0
MPPS_TARGET_RATIO = 0.8
MIN_CPU_SHARE = 0.90      # below: something else ran on the two CPUs
GEN_BOUND_DROPS = 0.05    # generator dropped less than this: it, not the DUT, set the rate


def load_results(path):
    """{size: {dut: {metric: {rep: [values]}}}} from size/dut/rep/metric/value lines."""
    data = {}
    for line in open(path):
        if not line.strip() or line.startswith("#"):
            continue
        size, dut, rep, metric, value = line.split()
        data.setdefault(int(size), {}).setdefault(dut, {}).setdefault(metric, {}) \
            .setdefault(int(rep), []).append(float(value))
    return data


def pooled(d, dut, metric):
    """All values of a metric, every repeat together."""
    reps = d.get(dut, {}).get(metric, {})
    return [v for r in sorted(reps) for v in reps[r]]


def per_rep(d, dut, metric, fn=statistics.median):
    reps = d.get(dut, {}).get(metric, {})
    return [fn(reps[r]) for r in sorted(reps)]


def median_or_none(values):
    return statistics.median(values) if values else None


def fmt(v, spec):
    return "n/a" if v is None else format(v, spec)


def cycles_by_repeat(d, dut, shares_seen):
    """(median, text) of one DUT's per-repeat busy cycles. In the text a
    repeat whose DUT and generator got less than MIN_CPU_SHARE of the CPUs is
    marked "*". Appends every repeat's CPU share to shares_seen."""
    c_reps = per_rep(d, dut, "cycles")
    shares = per_rep(d, dut, "cpu_share", min)
    shares_seen.extend(shares)
    marked = [f"{c:.1f}" + ("*" if share < MIN_CPU_SHARE else "") for c, share in zip(c_reps, shares)]
    return median_or_none(c_reps), " ".join(marked)


def summarize_size(size, d, duts):
    out = [f"{size}-byte frames"]
    row = "  {:<12} {:>15}  {:<22} {:>7}  {:<13} {:>7}"
    out.append(row.format("DUT", "busy cycles/pkt", "(per repeat)", "Mpps", "(1-s min-max)",
                          "samples"))
    cyc, mpps = {}, {}
    shares_seen = []
    for dut in duts:
        cyc[dut], marked = cycles_by_repeat(d, dut, shares_seen)
        samples = pooled(d, dut, "mpps")
        mpps[dut] = median_or_none(samples)
        spread = f"{min(samples):.2f}-{max(samples):.2f}" if samples else "n/a"
        out.append(row.format(DUT_LABELS[dut], fmt(cyc[dut], ".1f"), marked,
                              fmt(mpps[dut], ".2f"), spread, len(samples)))
    runs = len(shares_seen)
    disturbed = [share for share in shares_seen if share < MIN_CPU_SHARE]

    def ratio(a, b):
        return a / b if a is not None and b else None

    cyc_vs_ovs = ratio(cyc.get("aggswitch"), cyc.get("ovs"))
    cyc_vs_pmd = ratio(cyc.get("aggswitch"), cyc.get("testpmd"))
    mpps_vs_pmd = ratio(mpps.get("aggswitch"), mpps.get("testpmd"))
    out.append(f"  aggswitch / OVS-DPDK busy cycles per packet:   {fmt(cyc_vs_ovs, '.2f')}")
    out.append(f"  aggswitch / testpmd io busy cycles per packet: {fmt(cyc_vs_pmd, '.2f')}")
    out.append(f"  aggswitch / testpmd io Mpps:                   {fmt(mpps_vs_pmd, '.2f')}")

    # Which state the machine was in, judged by testpmd io's rate in each repeat.
    pmd_reps = per_rep(d, "testpmd", "mpps")
    threshold = STATE_THRESHOLD_MPPS.get(size)
    state = None
    if not pmd_reps:
        out.append("  machine state: unknown (testpmd io was not run)")
    elif threshold is None:
        out.append(f"  machine state: unclassified (no threshold for {size} B)")
    else:
        # A testpmd run that shared its CPUs with other work says nothing of the state.
        shares = per_rep(d, "testpmd", "cpu_share", min)
        states = ["disturbed" if share < MIN_CPU_SHARE else "fast" if m > threshold else "slow"
                  for m, share in zip(pmd_reps, shares)]
        clean = set(states) - {"disturbed"}
        state = clean.pop() if len(clean) == 1 else "MIXED" if clean else "unknown"
        out.append(f"  machine state: {state} (testpmd io Mpps per repeat: "
                   + ", ".join(f"{m:.1f} {s}" for m, s in zip(pmd_reps, states))
                   + f"; fast > {threshold:g})")

    if disturbed:
        out.append(f"  * disturbed: in {len(disturbed)} of {runs} runs the DUT and generator got less "
                   f"than {MIN_CPU_SHARE:.0%} of the 2 CPUs")
        out.append(f"    (min {min(disturbed):.0%}): other work ran on the machine; those repeats "
                   "are suspect")
    elif runs:
        out.append(f"  CPU time of DUT + generator: at least {MIN_CPU_SHARE:.0%} of the 2 CPUs "
                   "in every window: undisturbed")

    drops = {dut: median_or_none(per_rep(d, dut, "gen_drops")) for dut in duts}
    out.append("  generator drops (TX ring full): "
               + ", ".join(f"{DUT_LABELS[dut]} {fmt(drops[dut], '.0%')}" for dut in duts))
    bound = [DUT_LABELS[dut] for dut in duts
             if drops[dut] is not None and drops[dut] < GEN_BOUND_DROPS]
    if bound:
        out.append(f"    under {GEN_BOUND_DROPS:.0%}: the generator, not the DUT, set the rate of "
                   + ", ".join(bound) + ";")
        out.append("    its Mpps is a floor of what it could carry; compare cycles")

    def verdict(ok):
        return "n/a " if ok is None else ("PASS" if ok else "MISS")

    # In-band telemetry: each variant against aggswitch in the same repeat.
    base = per_rep(d, "aggswitch", "cycles")
    for dut, what, targeted in INT_VARIANTS:
        if dut not in duts or not base:
            continue
        deltas = [c - b for c, b in zip(per_rep(d, dut, "cycles"), base)]
        delta = median_or_none(deltas)
        out.append(f"  {DUT_LABELS[dut]} - aggswitch: {fmt(delta, '+.1f')} busy cycles/pkt ({what}; "
                   "per repeat " + " ".join(f"{x:+.1f}" for x in deltas) + ")")
        if targeted:
            out.append(f"  {verdict(None if delta is None else delta <= INT_TARGET_CYCLES)}  "
                       f"{DUT_LABELS[dut]} costs at most {INT_TARGET_CYCLES:g} cycles per frame "
                       "that matches no watch entry")

    if size == 64:
        c = cyc.get("aggswitch")
        out.append(f"  {verdict(None if c is None else c <= CYCLES_TARGET_64B)}  aggswitch <= "
                   f"{CYCLES_TARGET_64B:g} busy cycles per 64-byte packet ({fmt(c, '.1f')})")
        if state in ("slow", "MIXED") and cyc.get("testpmd") is not None:
            out.append(f"        judged in a {state.lower()} state, where memif RX costs more: "
                       f"testpmd io itself needed {cyc['testpmd']:.1f}")
    out.append(f"  {verdict(None if mpps_vs_pmd is None else mpps_vs_pmd >= MPPS_TARGET_RATIO)}  "
               f"aggswitch Mpps >= {MPPS_TARGET_RATIO:g} x testpmd io ({fmt(mpps_vs_pmd, '.2f')})")
    return out


def summary(args):
    data = load_results(args.results)
    duts = args.duts.split(",")
    out = [
        "aggswitch L2 forwarding vs testpmd io and OVS-DPDK (bench/l2_forwarding.sh)",
        "  testpmd txonly (memif client, CPU 0) -> DUT on CPU 1: memif server in, net_null sink out",
        f"  {args.repeats} repeats interleaved ({', '.join(DUT_LABELS[d] for d in duts)}), "
        f"{args.warmup:g} s warm-up + {args.window:g} s window each",
        f"  TSC {args.tsc_mhz} MHz; {args.header}",
        "  busy cycles/pkt: median of the per-repeat window values (aggswitch: busy TSC cycles of",
        "  lcore 1 / packets; testpmd: --record-core-cycles; OVS: pmd-stats 'processing cycles').",
        "  Mpps: median of the 1-s samples of the sink's TX rate, pooled over the repeats",
        "  (aggswitch: /metrics; testpmd: its own Tx-pps; OVS: dpctl/show -s).",
        "",
    ]
    for size in sorted(data):
        out += summarize_size(size, data[size], duts)
        out.append("")
    print("\n".join(out).rstrip())


# --- bench/aggregation.sh ---------------------------------------------------

AGG_LCORE = 1  # agg-bench.yaml's only worker lcore


def lcore_snapshot(path, lcore=AGG_LCORE):
    """One lcore's entry of an aggswitch /api/v1/lcores answer."""
    for entry in json.load(open(path))["lcores"]:
        if entry["lcore"] == lcore:
            return entry
    raise ValueError(f"{path}: no lcore {lcore}")


def agg_cycles(begin_path, end_path):
    """aggswitch busy cycles per received packet of lcore 1 between two snapshots."""
    begin, end = lcore_snapshot(begin_path), lcore_snapshot(end_path)
    packets = end["busy_packets"] - begin["busy_packets"]
    if packets <= 0:
        raise ValueError(f"aggswitch lcore {AGG_LCORE} received no packets in the window")
    return (end["busy_cycles"] - begin["busy_cycles"]) / packets


# The aggregation counters worth keeping per run: what went wrong, if anything.
AGG_COUNTERS = ("contributions", "completions", "results_sent", "collisions", "duplicates",
                "duplicate_results", "rejected", "result_no_mbuf")


def agg_counters(begin_path, end_path):
    """Changes of AGG_COUNTERS of lcore 1 between two snapshots (0 for one it lacks)."""
    begin = lcore_snapshot(begin_path)["aggregation"]
    end = lcore_snapshot(end_path)["aggregation"]
    return [(name, end.get(name, 0) - begin.get(name, 0)) for name in AGG_COUNTERS]


def gen_rates(gen_json, t0, t1):
    """agg-gen's answered contributions per second in each 1-s sample inside [t0, t1].

    A sample's "t" is the wall clock at its end and "seconds" its length; one
    that began before t0 or ended after t1 (plus 50 ms of scheduling slack) is
    outside the window.
    """
    samples = json.load(open(gen_json))["samples"]
    return [s["contributions_per_s"] for s in samples
            if s["t"] - s["seconds"] >= t0 - 0.05 and s["t"] <= t1 + 0.05]


def gen_check(gen_json):
    """(ok, wrong answers, unanswered contributions, retransmissions) of an agg-gen run."""
    r = json.load(open(gen_json))
    return int(bool(r["ok"])), r["errors_total"], r["unanswered"], r["retransmits"]


AGG_CYCLES_TARGET = 300.0   # busy cycles per 256-element contribution
AGG_CYCLES_TARGET_ELEMS = 256
AGG_RATE_TARGET_RATIO = 0.7
AGG_DUT_LABELS = {"aggswitch": "aggswitch", "testpmd": "testpmd io"}
DUT_SATURATED = 0.90  # share of its core a DUT is busy when it, not agg-gen, sets the rate


def load_agg_results(path):
    """{(workers, elems): {dut: {metric: {rep: [values]}}}} from the 6-column TSV."""
    data = {}
    for line in open(path):
        if not line.strip() or line.startswith("#"):
            continue
        workers, elems, dut, rep, metric, value = line.split()
        data.setdefault((int(workers), int(elems)), {}).setdefault(dut, {}) \
            .setdefault(metric, {}).setdefault(int(rep), []).append(float(value))
    return data


def summarize_agg_case(workers, elems, d, duts, tsc_mhz):
    out = [f"{workers} workers, {elems} x int32 sum ({elems * 4} B of gradient per contribution)"]
    row = "  {:<11} {:>19}  {:<24} {:>10} {:>8}  {:<13} {:>7} {:>6}"
    out.append(row.format("DUT", "busy cycles/contrib", "(per repeat)", "Mcontrib/s", "Gbit/s",
                          "(1-s min-max)", "samples", "busy"))
    cyc, rate, busy = {}, {}, {}
    shares_seen = []
    for dut in duts:
        cyc[dut], marked = cycles_by_repeat(d, dut, shares_seen)
        samples = pooled(d, dut, "contrib_per_s")
        rate[dut] = median_or_none(samples)
        spread = f"{min(samples) / 1e6:.2f}-{max(samples) / 1e6:.2f}" if samples else "n/a"
        gbps = None if rate[dut] is None else rate[dut] * elems * 32 / 1e9
        busy[dut] = None
        if tsc_mhz and cyc[dut] is not None and rate[dut] is not None:
            busy[dut] = cyc[dut] * rate[dut] / (tsc_mhz * 1e6)
        out.append(row.format(AGG_DUT_LABELS[dut], fmt(cyc[dut], ".1f"), marked,
                              fmt(None if rate[dut] is None else rate[dut] / 1e6, ".3f"),
                              fmt(gbps, ".2f"), spread, len(samples), fmt(busy[dut], ".0%")))
    runs = len(shares_seen)
    disturbed = [share for share in shares_seen if share < MIN_CPU_SHARE]

    ratio = None
    if rate.get("aggswitch") is not None and rate.get("testpmd"):
        ratio = rate["aggswitch"] / rate["testpmd"]
    out.append(f"  aggswitch / testpmd io contributions/s: {fmt(ratio, '.2f')}")
    bound = [AGG_DUT_LABELS[dut] for dut in duts
             if busy.get(dut) is not None and busy[dut] < DUT_SATURATED]
    if bound:
        out.append(f"    {', '.join(bound)} busy under {DUT_SATURATED:.0%} of its core: agg-gen, not the "
                   "DUT, set that rate (a floor of what the DUT carries);")
        if "testpmd io" in bound:
            out.append("    testpmd io could carry more, so the ratio flatters aggswitch; compare cycles")
    if cyc.get("aggswitch") is not None and cyc.get("testpmd") is not None:
        out.append(f"  aggregation's share of aggswitch's busy cycles (minus testpmd io's): "
                   f"{cyc['aggswitch'] - cyc['testpmd']:.1f}")

    checked = pooled(d, "aggswitch", "checked_ok")
    if checked:
        wrong = sum(pooled(d, "aggswitch", "wrong_answers"))
        unanswered = sum(pooled(d, "aggswitch", "unanswered"))
        retransmits = sum(pooled(d, "aggswitch", "retransmits"))
        collisions = sum(pooled(d, "aggswitch", "collisions"))
        ok = all(v == 1 for v in checked)
        out.append(f"  {'checked' if ok else 'FAIL   '} agg-gen runs against aggswitch with every "
                   f"result right and answered: {int(sum(checked))} of {len(checked)} "
                   f"(wrong answers {wrong:.0f}, unanswered {unanswered:.0f}, retransmissions "
                   f"{retransmits:.0f}, slot collisions in the windows {collisions:.0f})")

    if disturbed:
        out.append(f"  * disturbed: in {len(disturbed)} of {runs} runs the DUT and agg-gen got less "
                   f"than {MIN_CPU_SHARE:.0%} of the 2 CPUs (min {min(disturbed):.0%}): other work "
                   "ran on the machine; those repeats are suspect")
    elif runs:
        out.append(f"  CPU time of DUT + agg-gen: at least {MIN_CPU_SHARE:.0%} of the 2 CPUs in every "
                   "window: undisturbed")

    def verdict(ok):
        return "n/a " if ok is None else ("PASS" if ok else "MISS")

    if elems == AGG_CYCLES_TARGET_ELEMS:
        c = cyc.get("aggswitch")
        out.append(f"  {verdict(None if c is None else c <= AGG_CYCLES_TARGET)}  aggswitch <= "
                   f"{AGG_CYCLES_TARGET:g} busy cycles per {elems}-element contribution "
                   f"({fmt(c, '.1f')}; testpmd io moving the same frames: "
                   f"{fmt(cyc.get('testpmd'), '.1f')})")
    out.append(f"  {verdict(None if ratio is None else ratio >= AGG_RATE_TARGET_RATIO)}  aggswitch "
               f"contributions/s >= {AGG_RATE_TARGET_RATIO:g} x testpmd io ({fmt(ratio, '.2f')})")
    return out


def agg_summary(args):
    data = load_agg_results(args.results)
    duts = args.duts.split(",")
    out = [
        "aggswitch aggregation vs testpmd io (bench/aggregation.sh)",
        f"  agg-gen (memif client, CPU 0): W workers of one job, int32 sum, {args.inflight} chunks "
        "in flight per worker",
        "  -> DUT on CPU 1 (memif server): aggswitch reduces, one result per member and chunk;",
        "     testpmd io (port-topology loop) sends each contribution back (agg-gen --expect echo)",
        f"  {args.repeats} repeats interleaved ({', '.join(AGG_DUT_LABELS[d] for d in duts)}), "
        f"{args.warmup:g} s warm-up + {args.window:g} s window each",
        f"  TSC {args.tsc_mhz} MHz; {args.header}",
        "  busy cycles/contrib: median of the per-repeat window values (aggswitch: busy TSC cycles",
        "  of lcore 1 / packets received, results included; testpmd: --record-core-cycles).",
        "  Mcontrib/s, Gbit/s: agg-gen's answered contributions per second (x elems x 32 bit),",
        "  median of the 1-s samples in the windows, pooled over the repeats.",
        "  busy: the DUT core's busy share at that rate (busy cycles/contrib x Mcontrib/s / TSC).",
        "",
    ]
    try:
        tsc_mhz = float(args.tsc_mhz)
    except ValueError:
        tsc_mhz = None
    for workers, elems in sorted(data):
        out += summarize_agg_case(workers, elems, data[(workers, elems)], duts, tsc_mhz)
        out.append("")
    print("\n".join(out).rstrip())


# --- command line -----------------------------------------------------------


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("telemetry")
    s.add_argument("prefix")
    s.add_argument("query")
    s = sub.add_parser("sink-tx")
    s.add_argument("kind")
    s.add_argument("file")
    s.add_argument("port")
    s = sub.add_parser("cycles")
    s.add_argument("kind")
    s.add_argument("files", nargs="+")
    s = sub.add_parser("gen-drops")
    s.add_argument("log")
    s = sub.add_parser("rates")
    s.add_argument("kind")
    s.add_argument("run_dir")
    s.add_argument("window", type=int)
    s = sub.add_parser("summary")
    s.add_argument("results")
    s.add_argument("--duts", default="aggswitch,testpmd,ovs")
    s.add_argument("--repeats", type=int, required=True)
    s.add_argument("--window", type=float, required=True)
    s.add_argument("--warmup", type=float, required=True)
    s.add_argument("--tsc-mhz", default="?")
    s.add_argument("--header", default="")
    s = sub.add_parser("agg-cycles")
    s.add_argument("begin")
    s.add_argument("end")
    s = sub.add_parser("agg-counters")
    s.add_argument("begin")
    s.add_argument("end")
    s = sub.add_parser("gen-rates")
    s.add_argument("gen_json")
    s.add_argument("t0", type=float)
    s.add_argument("t1", type=float)
    s = sub.add_parser("gen-check")
    s.add_argument("gen_json")
    s = sub.add_parser("agg-summary")
    s.add_argument("results")
    s.add_argument("--duts", default="aggswitch,testpmd")
    s.add_argument("--repeats", type=int, required=True)
    s.add_argument("--window", type=float, required=True)
    s.add_argument("--warmup", type=float, required=True)
    s.add_argument("--inflight", type=int, required=True)
    s.add_argument("--tsc-mhz", default="?")
    s.add_argument("--header", default="")
    args = p.parse_args()

    try:
        if args.cmd == "telemetry":
            print(telemetry(args.prefix, args.query))
        elif args.cmd == "sink-tx":
            print(sink_tx(args.kind, open(args.file).read(), args.port))
        elif args.cmd == "cycles":
            print(f"{cycles(args.kind, args.files):.2f}")
        elif args.cmd == "gen-drops":
            sent, dropped = gen_drops(open(args.log, errors="replace").read())
            print(f"{dropped / max(1, sent + dropped):.4f}")
        elif args.cmd == "rates":
            for r in rates(args.kind, args.run_dir, args.window):
                print(f"{r:.0f}")
        elif args.cmd == "summary":
            summary(args)
        elif args.cmd == "agg-cycles":
            print(f"{agg_cycles(args.begin, args.end):.2f}")
        elif args.cmd == "agg-counters":
            for name, value in agg_counters(args.begin, args.end):
                print(name, value)
        elif args.cmd == "gen-rates":
            for r in gen_rates(args.gen_json, args.t0, args.t1):
                print(f"{r:.0f}")
        elif args.cmd == "gen-check":
            print(*gen_check(args.gen_json))
        elif args.cmd == "agg-summary":
            agg_summary(args)
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        print(f"parse_stats.py {args.cmd}: {e}", file=sys.stderr)
        sys.exit(1)


# --- bench/allreduce.sh -------------------------------------------------------

ALLREDUCE_LABELS = {"udp": "aggswitch UDP", "udp_large": "aggswitch UDP", "af_xdp": "aggswitch AF_XDP",
                    "af_xdp_large": "aggswitch AF_XDP", "gloo": "Gloo ring", "mpi": "Open MPI"}
# The aggswitch methods: the workers' transport (as the ratio lines name it).
ALLREDUCE_TRANSPORTS = {"udp": "udp", "udp_large": "udp", "af_xdp": "af_xdp",
                        "af_xdp_large": "af_xdp"}
ALLREDUCE_MAX_OTHER_SHARE = 0.10  # of the 2 CPUs used by other processes: a disturbed run


def allreduce_run(method, world, ranks, checks):
    """One run's metrics from its ranks' JSON summaries (agg-worker --json, or
    gloo_allreduce / mpi_allreduce --json, which use agg-worker's field names).

    checks: agg-worker's verified run; without them each rank's own summary
    must say it checked its result. Raises ValueError when any rank failed or did not check: such a run
    reports no speed. time_s is the smallest per-rank median (see
    bench/allreduce.sh: the rank that joined last waited least)."""
    docs = sorted((json.load(open(p)) for p in ranks), key=lambda d: d["rank"])
    if len(docs) != world:
        raise ValueError(f"{len(docs)} of {world} ranks wrote a summary")
    for d in [json.load(open(p)) for p in checks] or docs:
        if not d["ok"] or d["verified"] < 1 or d["mismatches"]:
            raise ValueError(f"rank {d['rank']}: the result check failed: "
                             f"{d.get('failure') or 'not verified'}")
    for d in docs:
        if not d["ok"] or d["completed"] != d["iterations"]:
            raise ValueError(f"rank {d['rank']}: {d.get('failure') or 'not every allreduce completed'}")
    times = [d["latency_s"]["median"] for d in docs]
    t = min(times)
    out = [("ok", 1), ("time_s", f"{t:.6f}"), ("algbw_bytes_per_s", f"{docs[0]['bytes'] / t:.0f}"),
           ("iterations", docs[0]["iterations"])]
    out += [("rank_time_s", f"{v:.6f}") for v in times]
    if method in ALLREDUCE_TRANSPORTS:
        out.append(("retransmissions", sum(d["client"]["retransmissions"] for d in docs)))
        out.append(("chunks", sum(d["client"]["chunks"] for d in docs)))
    return out


def allreduce_medians(d, method):
    """(median time_s over the repeats that checked out, [(time_s, disturbed) per repeat])."""
    times = per_rep(d, method, "time_s")
    reps = sorted(d.get(method, {}).get("time_s", {}))
    shares = {r: max(d[method].get("other_cpu_share", {}).get(r, [0])) for r in reps}
    marked = [(t, shares[r] > ALLREDUCE_MAX_OTHER_SHARE) for t, r in zip(times, reps)]
    return median_or_none(times), marked


def allreduce_verdict(results, size, method, ratio):
    data = load_results(results).get(size, {})
    agg, _ = allreduce_medians(data, method)
    gloo, _ = allreduce_medians(data, "gloo")
    if gloo is None:
        return "n/a"
    return "PASS" if agg is not None and gloo / agg >= ratio else "MISS"


def fmt_bytes(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 and b % (1 << 20) == 0 else f"{b >> 10} KiB"


def method_mtu(m, args):
    return args.large_mtu if m.endswith("_large") else args.mtu


def method_label(m, args):
    if m in ALLREDUCE_TRANSPORTS:
        return f"{ALLREDUCE_LABELS[m]} {method_mtu(m, args)}"
    return ALLREDUCE_LABELS[m]


def allreduce_size(size, d, methods, args):
    out = [f"{fmt_bytes(size)} per rank ({size // 4} float32)"]
    row = "  {:<22} {:>12}  {:<25} {:>10} {:>5} {:>7} {:>7} {:>13} {:>12}"
    out.append(row.format("method", "time/op", "(per repeat, ms)", "algbw MB/s", "iters",
                          "checked", "spread", "switch CPU/op", "ranks CPU/op"))
    bw = {}
    for m in methods:
        t, marked = allreduce_medians(d, m)
        ok = pooled(d, m, "ok")
        bw[m] = size / t if t else None
        iters = pooled(d, m, "iterations")
        ranks = d.get(m, {}).get("rank_time_s", {})
        spreads = [max(v) / min(v) - 1 for v in ranks.values() if v and min(v) > 0]
        switch_cpu = median_or_none(per_rep(d, m, "switch_cpu_s_per_op"))
        ranks_cpu = median_or_none(per_rep(d, m, "ranks_cpu_s_per_op"))
        out.append(row.format(
            method_label(m, args), "n/a" if t is None else f"{t * 1e3:.2f} ms",
            " ".join(f"{v * 1e3:.1f}" + ("*" if dist else "") for v, dist in marked),
            fmt(None if bw[m] is None else bw[m] / 1e6, ".1f"),
            f"{int(iters[0])}" if iters else "n/a", f"{int(sum(ok))} of {len(ok)}",
            fmt(median_or_none(spreads), "+.0%"),
            "-" if m not in ALLREDUCE_TRANSPORTS else fmt(
                None if switch_cpu is None else switch_cpu * 1e3, ".1f") + " ms",
            fmt(None if ranks_cpu is None else ranks_cpu * 1e3, ".1f") + " ms"))
    for m in methods:
        if m not in ALLREDUCE_TRANSPORTS:
            continue
        ratios = []
        for base in ("gloo", "mpi"):
            if base in methods:
                r = bw[m] / bw[base] if bw.get(m) and bw.get(base) else None
                ratios.append(f"/ {ALLREDUCE_LABELS[base]} {fmt(r, '.2f')}")
        retx = per_rep(d, m, "retransmissions", sum)
        chunks = per_rep(d, m, "chunks", sum)
        if retx and chunks:
            ratios.append(f"retransmissions per run (all ranks) "
                          f"{', '.join(f'{r:.0f}' for r in retx)} of {chunks[0]:.0f} chunks")
        out.append(f"  {method_label(m, args)}: " + "    ".join(ratios))
    failed = [m for m in methods if 0 in pooled(d, m, "ok")]
    for m in failed:
        out.append(f"  FAIL   {ALLREDUCE_LABELS[m]}: a run failed or its result did not check out; "
                   "it reports no time (logs kept)")
    return out, bw


def allreduce_summary(args):
    data = load_results(args.results)
    methods = args.methods.split(",")
    chunks = {m: (method_mtu(m, args) - 28 - 48 - 64) // 4 for m in ALLREDUCE_TRANSPORTS}
    out = [
        f"float32 sum allreduce among {args.world} ranks on one machine (bench/allreduce.sh)",
        f"  aggswitch: aggswitch on {args.world} {args.ports} ports (veth pairs into {args.world} "
        "namespaces), both lcores on CPU 1;",
        f"             agg-worker per namespace over kernel UDP or AF_XDP at mtu {args.mtu} "
        f"({chunks['udp']} float32 per datagram)",
        f"             and {args.large_mtu} ({chunks['af_xdp_large']} float32), float32 as int32 "
        f"fixed point, job in band, window {args.window}",
        "  Gloo ring:  gloo::allreduce, ring algorithm, TCP on 127.0.0.1, FileStore rendezvous",
        "  Open MPI:   MPI_Allreduce, --mca pml ob1 --mca btl tcp,self (lo), --oversubscribe "
        "--bind-to none",
        f"  {args.repeats} repeats interleaved ({', '.join(ALLREDUCE_LABELS[m] for m in methods)}); "
        "every run's result checked once, bit for bit",
        "  time/op: median over the repeats of each run's fastest rank's median iteration;",
        "  algbw = bytes / time (MB = 10^6 B). * = disturbed: other processes used more than "
        f"{ALLREDUCE_MAX_OTHER_SHARE:.0%} of the CPUs",
        "  CPU/op: CPU seconds per allreduce over the timed run (/proc): the switch process, and "
        "the ranks summed (with mpirun)",
        f"  {args.header}",
        "",
    ]
    bws = {}
    for size in sorted(data):
        lines, bws[size] = allreduce_size(size, data[size], methods, args)
        out += lines + [""]
    # The targets: AF_XDP and UDP, each at its largest frame, against Gloo at
    # 16 and 64 MiB.
    xdp = "af_xdp_large" if "af_xdp_large" in methods else "af_xdp"
    udp = "udp_large" if "udp_large" in methods else "udp"
    for m, target in ((xdp, args.target_ratio), (udp, args.udp_target_ratio)):
        if m not in methods or "gloo" not in methods:
            continue
        for size in (16 << 20, 64 << 20):
            if size not in bws:
                continue
            a, g = bws[size].get(m), bws[size].get("gloo")
            r = a / g if a and g else None
            ok = None if g is None else (r is not None and r >= target)
            verdict = "n/a " if ok is None else ("PASS" if ok else "MISS")
            out.append(f"{verdict}  {method_label(m, args)} algbw >= {target:g} x Gloo ring's at "
                       f"{fmt_bytes(size)} ({fmt(r, '.2f')}: "
                       f"{fmt(None if a is None else a / 1e6, '.1f')} vs "
                       f"{fmt(None if g is None else g / 1e6, '.1f')} MB/s)")
    if "gloo" in methods:
        out.append("")
        for size in sorted(bws):
            for m in methods:
                if m not in ALLREDUCE_TRANSPORTS:
                    continue
                a, g = bws[size].get(m), bws[size].get("gloo")
                label = f"{size >> 20}M" if size % (1 << 20) == 0 else f"{size >> 10}K"
                out.append(f"ratio_vs_gloo size={label} transport={ALLREDUCE_TRANSPORTS[m]} "
                           f"mtu={method_mtu(m, args)} ratio={fmt(a / g if a and g else None, '.2f')}")
    try:
        profile = open(args.profile).read().rstrip()
    except OSError:
        profile = ""
    if profile:
        out += ["", profile]
    print("\n".join(out).rstrip())


# Kernel symbols by what they do, first match wins (copies before skb_*).
KERNEL_BUCKETS = [
    # A guest without NMIs for the PMU samples code that runs with interrupts
    # off (softirqs: veth NAPI, XDP, the copies) where it turns them back on.
    ("softirqs sampled at irq enable (veth, XDP, copies)", r"^(pvm_irq_enable|native_irq_enable|"
                                                           r"arch_local_irq_enable)$"),
    ("AF_XDP sockets and XDP (xsk, redirect, BPF)", r"^(xsk_|__xsk|xp_|xdp_|__xdp|bpf_|__bpf|"
                                                    r"dev_map|cpu_map|veth_xdp|veth_xsk)"),
    ("af_packet rings (tpacket_rcv, tpacket_snd)", r"^(tpacket|__tpacket|packet_|__packet_|prb_|run_filter)"),
    ("copies and checksums", r"(copy|memcpy|memmove|memset|csum|check_object_size|check_heap_object)"),
    ("UDP/IP and routing", r"^(udp|__udp|ip_|__ip_|ip4|inet|__inet|fib|__fib|rt_|dst_|raw_|icmp|ipv4|nf_|"
                           r"__sk_dst|sk_dst|sock_def|ipt_|ip_route|xfrm|__xfrm|sk_filter)"),
    ("veth, softirq, netdev", r"^(veth|netif|__netif|net_rx_action|napi|__napi|gro|handle_softirqs|"
                              r"__do_softirq|do_softirq|__local_bh|dev_|__dev_|validate_xmit|eth_type_trans|"
                              r"process_backlog|enqueue_to_backlog|rps_|neigh|arp_|skb_defer|"
                              r"sch_direct_xmit|__qdisc|qdisc|pfifo)"),
    ("skb and memory alloc/free", r"^(__alloc_skb|alloc_skb|__build_skb|build_skb|kmalloc|__kmalloc|kfree|"
                                  r"kmem_cache|__slab|slab_|___slab|skb_|__skb|consume_skb|__kfree_skb|"
                                  r"sock_wfree|sock_rfree|sock_alloc_send|page_frag|__page|free_unref|"
                                  r"refill_obj|mod_objcg|obj_cgroup|__mod_|sk_skb|sock_kmalloc|"
                                  r"__sock_wfree|alloc_pages|get_page_from|rmqueue|__rmqueue)"),
    ("syscalls, scheduling, locks, timers", r"^(entry_|syscall|do_syscall|__x64_sys|x64_sys|__sys_|__se_sys|"
                                            r"sys_|schedule|__schedule|pick_|finish_task|switch_|"
                                            r"__switch|context_switch|dequeue|enqueue_task|update_|"
                                            r"try_to_wake|wake_up|__wake|futex|do_sys_poll|do_poll|poll|"
                                            r"__pollwait|sock_poll|udp_poll|ep_|hrtimer|_raw_spin|"
                                            r"native_|read_tsc|ktime|irqentry|__raw_callee|pv_|rcu|__rcu|"
                                            r"lock_|mutex|__cond_resched|fput|fdget|__fget|apparmor|"
                                            r"security|exit_to_user|restore_|clear_bhb|__x86|x86_|"
                                            r"error_entry|asm_|sysvec|__sysvec|timekeeping|tick_|"
                                            r"account_|cpuacct|cgroup|psi_|set_next|put_prev|"
                                            r"__update|reweight|avg_vruntime|vruntime|sched_)"),
]
ROLE_BY_COMM = [("switch", r"^(rte-worker|lcore-worker|aggswitch|eal-intr|rte_mp|civetweb|telemetry|dpdk)"),
                ("workers", r"^agg-worker"), ("idle", r"^swapper")]


def perf_rows(path):
    """(percent, comm, dso, mode, symbol) of `perf report --no-children --sort comm,dso,sym -g none`."""
    rows = []
    for line in open(path, errors="replace"):
        m = re.match(r"^\s*([\d.]+)%\s+(\S.*?)\s{2,}(\S+)\s+\[(.)\]\s+(.*?)\s*$", line)
        if m:
            rows.append((float(m.group(1)), m.group(2).strip(), m.group(3), m.group(4), m.group(5)))
    if not rows:
        raise ValueError(f"{path}: no samples")
    return rows


def profile_bucket(comm, dso, mode, sym):
    """(role, what) of one perf row: role switch, workers, idle or other."""
    role = next((r for r, rx in ROLE_BY_COMM if re.match(rx, comm)), "other")
    if role == "idle":
        return role, "idle"
    if mode == "k" or dso.startswith("[kernel"):
        what = next((name for name, rx in KERNEL_BUCKETS if re.search(rx, sym)), "other kernel")
        return role, "kernel: " + what
    if role == "switch":
        if "af_packet" in dso or "af_xdp" in dso or re.search(r"memmove|memcpy", sym):
            return role, "user: port driver (af_packet or af_xdp PMD), frame copies"
        if "rte_eal_wait_lcore" in sym:
            return role, "user: main thread spinning in rte_eal_wait_lcore"
        return role, "user: dataplane (poll loop, classify, aggregate, build results)"
    if role == "workers":
        if re.search(r"GeneratedVectors|FileVectors|scalbn|ldexp", sym):
            return role, "user: loading the next input (untimed)"
        if re.search(r"EncodeFixed|DecodeFixed|MaxExponent|FixedPoint|Encode(Avx|Scalar)|"
                     r"Decode(Avx|Scalar)|MaxMagnitudeBits", sym):
            return role, "user: fixed point encode/decode"
        return role, "user: client engine, memcpy, libc"
    return role, "user: other processes (bench scripts, perf)"


def allreduce_profile(args):
    """Where the two CPUs' time went in one profiled aggswitch run (see
    bench/allreduce.sh profile_aggswitch): perf samples by process role and
    by what the code does, the switch lcore's own busy/idle cycles, and the
    per-datagram cost."""
    d = args.run_dir
    rows = perf_rows(f"{d}/perf-report.txt")
    total = sum(r[0] for r in rows)
    share = {}
    for pct, comm, dso, mode, sym in rows:
        key = profile_bucket(comm, dso, mode, sym)
        share[key] = share.get(key, 0) + pct / total
    ranks = sorted((json.load(open(f"{d}/timed.{r}.json")) for r in range(args.world)),
                   key=lambda x: x["rank"])
    t_allreduce = min(x["latency_s"]["median"] for x in ranks)
    window = args.t1 - args.t0
    per_chunk = (args.mtu - 28 - 48 - 64) // 4  # the client's default room for 32 missing ids
    chunks = (args.bytes // 4 + per_chunk - 1) // per_chunk
    datagrams = 2 * args.world * chunks  # contributions in, results out
    begin, end = lcore_snapshot(f"{d}/lcores-begin.json"), lcore_snapshot(f"{d}/lcores-end.json")
    busy = end["busy_cycles"] - begin["busy_cycles"]
    idle = end["idle_cycles"] - begin["idle_cycles"]
    pkts = end["busy_packets"] - begin["busy_packets"]

    idle_share = share.get(("idle", "idle"), 0)
    roles = ("switch", "workers", "other")
    whats = sorted({w for (r, w) in share if r != "idle"},
                   key=lambda w: (not w.startswith("user"), -sum(share.get((r, w), 0) for r in roles)))
    out = [f"Where the time goes: one more {fmt_bytes(args.bytes)} {method_label(args.method, args)} run, "
           f"{args.iterations} "
           f"allreduces under perf record -a -g (both CPUs, {window:.1f} s)",
           f"  time per allreduce {t_allreduce * 1e3:.0f} ms (fastest rank); the two CPUs were "
           f"{1 - idle_share:.0%} busy"
           + (", so the run is CPU-bound" if idle_share < 0.10 else
              ": not CPU-bound, so latency or the window limits it"),
           "  share of both CPUs' time                                          switch  workers   other",
           ]
    row = "    {:<62} {:>6.1%} {:>8.1%} {:>7.1%}"
    for w in whats:
        out.append(row.format(w, *(share.get((r, w), 0) for r in roles)))
    out.append(row.format("total", *(sum(v for (r, _), v in share.items() if r == role) for role in roles)))
    out.append(f"    idle {share.get(('idle', 'idle'), 0):.1%}")

    kernel = sum(v for (r, w), v in share.items() if w.startswith("kernel"))
    gen = share.get(("workers", "user: loading the next input (untimed)"), 0)
    switch_user = sum(v for (r, w), v in share.items() if r == "switch" and w.startswith("user"))
    pmd = share.get(("switch", "user: port driver (af_packet or af_xdp PMD), frame copies"), 0)
    xsk = sum(v for (r, w), v in share.items() if w == "kernel: AF_XDP sockets and XDP (xsk, redirect, BPF)")
    transport = ALLREDUCE_TRANSPORTS[args.method]
    dataplane = share.get(("switch", "user: dataplane (poll loop, classify, aggregate, build results)"), 0)
    fixed = share.get(("workers", "user: fixed point encode/decode"), 0)
    engine = share.get(("workers", "user: client engine, memcpy, libc"), 0)
    lcore_thread = sum(r[0] for r in rows if re.match(r"^(rte-worker|lcore-worker)", r[1])) / total
    work = 1 - idle_share - gen
    # While an allreduce runs the CPUs are as busy as over the profile; its CPU
    # time is both CPUs over its duration.
    us_per_datagram = 2 * t_allreduce * (1 - idle_share) * 1e6 / datagrams
    lcore_idle = idle / (busy + idle) if busy + idle else 0
    out += [
        "",
        f"  Per allreduce the switch takes in {args.world} x {chunks} contributions of "
        f"{per_chunk} float32 and sends as many results: {datagrams} datagrams of "
        f"about {args.mtu} B,",
        f"  so {2 * t_allreduce * 1e3:.0f} CPU-ms per allreduce is {us_per_datagram:.1f} us of CPU "
        "per datagram. Of the CPU time spent on the allreduces",
        f"  (loading the inputs, {gen:.0%}, and idle left out):",
        f"  - the kernel: {kernel / work:.0%}, of it AF_XDP and XDP {xsk / work:.0%} "
        f"(the workers {'send and receive through kernel UDP sockets' if transport == 'udp' else 'use AF_XDP sockets'}"
        f"; the switch's ports are {args.ports} sockets,",
        "    copy mode on a veth: every frame is copied once by the kernel each way);",
        f"  - the switch's user space: {switch_user / work:.0%} (its port driver's frame copies "
        f"{pmd / work:.0%}, its dataplane {dataplane / work:.0%}); its lcore thread ran "
        f"{lcore_thread:.0%} of both CPUs' time,",
        f"    and its polls found nothing for {lcore_idle:.0%} of its TSC cycles: busy polling that "
        "a dedicated switch has to itself",
        f"    but that competes with the workers here. Busy, it spent "
        f"{busy / pkts if pkts else 0:.0f} TSC cycles per received datagram",
        "    (wall cycles, preemption included);",
        f"  - the workers' user space: {(fixed + engine) / work:.0%} (fixed point encode/decode "
        f"{fixed / work:.0%}).",
        f"  Gloo and MPI use TCP over loopback, whose 64 KiB MTU means about "
        f"{65536 // args.mtu} times fewer packets per byte than this run's {args.mtu}-byte datagrams.",
    ]
    return "\n".join(out)


def allreduce_main():
    p = argparse.ArgumentParser(description="bench/allreduce.sh's parsers (see the module doc)")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("allreduce-run")
    s.add_argument("method", choices=sorted(ALLREDUCE_LABELS))
    s.add_argument("world", type=int)
    s.add_argument("ranks", nargs="+")
    s.add_argument("--checks", nargs="*", default=[])
    s = sub.add_parser("allreduce-verdict")
    s.add_argument("results")
    s.add_argument("--size", type=int, required=True)
    s.add_argument("--method", choices=sorted(ALLREDUCE_TRANSPORTS), required=True)
    s.add_argument("--ratio", type=float, required=True)
    s = sub.add_parser("allreduce-profile")
    s.add_argument("--run-dir", required=True)
    s.add_argument("--t0", type=float, required=True)
    s.add_argument("--t1", type=float, required=True)
    s.add_argument("--world", type=int, required=True)
    s.add_argument("--bytes", type=int, required=True)
    s.add_argument("--mtu", type=int, required=True)
    s.add_argument("--large-mtu", type=int, default=0)
    s.add_argument("--method", choices=sorted(ALLREDUCE_TRANSPORTS), required=True)
    s.add_argument("--ports", default="net_af_xdp")
    s.add_argument("--iterations", type=int, required=True)
    s = sub.add_parser("allreduce-summary")
    s.add_argument("results")
    s.add_argument("--methods", default="udp,udp_large,af_xdp,af_xdp_large,gloo,mpi")
    s.add_argument("--repeats", type=int, required=True)
    s.add_argument("--world", type=int, required=True)
    s.add_argument("--window", type=int, required=True)
    s.add_argument("--mtu", type=int, required=True)
    s.add_argument("--large-mtu", type=int, required=True)
    s.add_argument("--ports", default="net_af_xdp")
    s.add_argument("--target-ratio", type=float, required=True)
    s.add_argument("--udp-target-ratio", type=float, required=True)
    s.add_argument("--profile", default="")
    s.add_argument("--header", default="")
    args = p.parse_args()
    try:
        if args.cmd == "allreduce-run":
            for name, value in allreduce_run(args.method, args.world, args.ranks, args.checks):
                print(name, value)
        elif args.cmd == "allreduce-verdict":
            print(allreduce_verdict(args.results, args.size, args.method, args.ratio))
        elif args.cmd == "allreduce-profile":
            print(allreduce_profile(args))
        elif args.cmd == "allreduce-summary":
            allreduce_summary(args)
    except (OSError, ValueError, KeyError, IndexError, json.JSONDecodeError) as e:
        print(f"parse_stats.py {args.cmd}: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    if sys.argv[1:2] and sys.argv[1].startswith("allreduce-"):
        allreduce_main()
    else:
        main()
