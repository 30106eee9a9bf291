"""System test: the real aggswitch under a service manager's notification
socket, as systemd runs it (Type=notify, WatchdogSec): it says READY=1 once
it forwards, feeds the watchdog every half period while its worker polls,
says RELOADING=1 then READY=1 around a SIGHUP, and STOPPING=1 on SIGTERM,
then exits 0. The test binds the socket itself, as systemd would.

Usage: service_notify_test.py AGGSWITCH      (DPDK on a net_null port: root)
Prints one PASS or FAIL line per check and exits 1 on any failure.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

WATCHDOG_USEC = 400_000
CONFIG = """eal: {lcores: "0,1", main_lcore: 0, memory_mb: 256, file_prefix: agg-notify-%d}
switch: {mac: 02:a9:9c:00:00:09}
ports:
  - {name: p0, devargs: net_null_notify0, access: 10}
workers:
  - {lcore: 1, rx: [p0]}
http: {listen: "127.0.0.1:19598"}
""" % os.getpid()

failed = 0


def check(what, ok, detail=""):
    global failed
    print(("PASS  " if ok else "FAIL  ") + what)
    if detail:
        print("      " + detail)
    failed += 0 if ok else 1


def main():
    work = tempfile.mkdtemp(prefix="aggswitch-notify.")
    config, path = os.path.join(work, "switch.yaml"), os.path.join(work, "notify.sock")
    with open(config, "w") as f:
        f.write(CONFIG)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.2)
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC=str(WATCHDOG_USEC))
    switch = subprocess.Popen([sys.argv[1], "--config", config], env=env,
                              stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "log"), "w"))
    messages = []  # (seconds since start, text)
    start = time.monotonic()
    sent_hup = sent_term = None

    def receive_until(seconds):
        while time.monotonic() - start < seconds:
            try:
                messages.append((time.monotonic() - start, sock.recv(1024).decode()))
            except socket.timeout:
                pass

    try:
        # Ready within 30 s; then 2 s of watchdog, a reload, 1 s more, a stop.
        while time.monotonic() - start < 30 and not any(m.startswith("READY=1") for _, m in messages):
            receive_until(time.monotonic() - start + 0.2)
        ready_at = next((t for t, m in messages if m.startswith("READY=1")), None)
        check("READY=1 once the dataplane forwards", ready_at is not None,
              next((m.replace("\n", " | ") for _, m in messages if m.startswith("READY=1")), ""))
        if ready_at is None:
            return
        receive_until(ready_at + 2.0)
        pings = [t for t, m in messages if m == "WATCHDOG=1"]
        gaps = [b - a for a, b in zip(pings, pings[1:])]
        # Every half period: 10 pings in 2 s (the times are when this process
        # read them, so single gaps say little), and no worker named as stalled.
        stalled = [m for _, m in messages if "has not polled" in m]
        check("the watchdog is fed every half WatchdogSec while the worker polls",
              len(pings) >= 8 and not stalled,
              "%d pings in 2 s, gaps %s ms" % (len(pings), " ".join("%.0f" % (1000 * g) for g in gaps)))
        sent_hup = time.monotonic() - start
        switch.send_signal(signal.SIGHUP)
        receive_until(sent_hup + 1.0)
        after = [m for t, m in messages if t >= sent_hup]
        reloading = next((i for i, m in enumerate(after) if m.startswith("RELOADING=1\nMONOTONIC_USEC=")), None)
        check("SIGHUP: RELOADING=1 (with MONOTONIC_USEC), then READY=1 again",
              reloading is not None and any(m.startswith("READY=1") for m in after[reloading + 1:]),
              " / ".join(m.replace("\n", " | ") for m in after if not m.startswith("WATCHDOG")))
        sent_term = time.monotonic() - start
        switch.send_signal(signal.SIGTERM)
        code = switch.wait(timeout=15)
        receive_until(time.monotonic() - start + 0.3)
        check("SIGTERM: STOPPING=1, then exit 0",
              code == 0 and any(m.startswith("STOPPING=1") for t, m in messages if t >= sent_term),
              "exit %d" % code)
    finally:
        if switch.poll() is None:
            switch.kill()
            switch.wait()
        if failed:
            print(open(os.path.join(work, "log")).read()[-2000:])
        subprocess.run(["rm", "-rf", work])
    print("%d passed, %d failed" % (4 - failed, failed))


if __name__ == "__main__":
    main()
    sys.exit(1 if failed else 0)
