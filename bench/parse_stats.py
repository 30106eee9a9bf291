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

DUT_LABELS = {"aggswitch": "aggswitch", "testpmd": "testpmd io", "ovs": "OVS-DPDK"}

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


if __name__ == "__main__":
    main()
