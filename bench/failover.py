#!/usr/bin/env python3
"""Rounds of leader fail-over for bench/failover.sh, and its table.

  failover.py rounds OUT.jsonl ROW TTL ROUNDS KIND DIR [--settle S] [--jitter S] [--limit S]
                     [--parallel] -- TEMPLATE...
      ROUNDS rounds of three candidates A, B, C on a key of their own (fo-ROW-N): A leads, B and C
      join --settle seconds apart (they wait), after a random pause of 0 to --jitter seconds (the
      kill lands anywhere in the renewal cycle) A's process is killed (SIGKILL); the next leader's
      command is seen to start; that leader ends cleanly; the last one takes over and ends
      cleanly too. One JSON line per round in OUT. TEMPLATE is a candidate's command with {key},
      {id} and {log} in it.
      KIND "command": the candidate runs a command, `bench/helper lead {log} {id}`, which appends
        "START_NS PID ID" to {log} first thing; after a kill -9 its death (dlock's guard kills it)
        is seen through a pidfd of that PID; it ends cleanly on SIGUSR1, appending "END_NS PID ID
        end" right before it exits 0: a clean hand-over is timed from that stamp.
      KIND "proclaim": the candidate runs no command (etcdctl elect): leadership is the time its
        first line of output is read; its death is the pidfd of the candidate process itself;
        a clean end is SIGTERM (etcdctl resigns), timed from the signal.
      --limit bounds each wait, in seconds. --parallel: all rounds at once (threads).
  failover.py table OUT.jsonl
      the Markdown table, one row per ROW in the order first seen.

Times are CLOCK_REALTIME nanoseconds (the helper's stamps and time.time_ns() compare). The
pidfd's wake-up is late by this process's scheduling delay, which a loaded machine makes
milliseconds: run as root, it waits at real-time priority (SCHED_FIFO 1, not passed to the
candidates), and each clean hand-over records that delay (observer_lag_ms).
"""
import json
import os
import random
import select
import signal
import statistics
import subprocess
import sys
import threading
import time


def wait_readable(fd, limit_s):
    """Blocks until fd is readable (a pidfd: the process ended); returns time_ns() then."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if not poller.poll(int(limit_s * 1000)):
        raise TimeoutError("a process did not end")
    return time.time_ns()


class Candidate:
    """One candidate process; `lead` is (start_ns, command pid) once it leads."""

    def __init__(self, template, key, ident, log, kind, errlog):
        argv = [a.replace("{key}", key).replace("{id}", ident).replace("{log}", log) for a in template]
        self.ident = ident
        self.kind = kind
        self.lead = None
        self.end = None  # the command's end stamp (ns)
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE if kind == "proclaim" else subprocess.DEVNULL,
                                     stderr=errlog)
        self.pidfd = os.pidfd_open(self.proc.pid)
        if kind == "proclaim":
            self.seen = threading.Event()
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for _ in self.proc.stdout:
            if self.lead is None:
                self.lead = (time.time_ns(), self.proc.pid)
                self.seen.set()

    def close(self):
        os.close(self.pidfd)


class Round:
    """One round on its own key; see the module's doc."""

    def __init__(self, args, number):
        self.a = args
        self.key = "fo-%s-%d" % ("".join(c if c.isalnum() else "-" for c in args.row.lower()), number)
        self.log = os.path.join(args.dir, self.key + ".log")
        self.err = open(os.path.join(args.dir, self.key + ".err"), "ab")
        self.cands = []
        self.read_off = 0

    def start(self, ident):
        c = Candidate(self.a.template, self.key, ident, self.log, self.a.kind, self.err)
        self.cands.append(c)
        return c

    def poll_log(self):
        """Reads the command kind's new start lines into the candidates' `lead`."""
        try:
            with open(self.log, "rb") as f:
                f.seek(self.read_off)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        self.read_off += end
        for line in data[:end].decode().splitlines():
            ns, pid, ident, *what = line.split()
            for c in self.cands:
                if c.ident == ident and what == ["end"]:
                    c.end = int(ns)
                elif c.ident == ident:
                    c.lead = (int(ns), int(pid))

    def next_leader(self, among):
        """Waits until one of `among` leads; returns it (it must be the only one)."""
        deadline = time.monotonic() + self.a.limit
        while time.monotonic() < deadline:
            if self.a.kind == "command":
                self.poll_log()
            leading = [c for c in among if c.lead]
            if len(leading) > 1:
                raise RuntimeError("two candidates lead at once: " + ", ".join(c.ident for c in leading))
            if leading:
                return leading[0]
            for c in among:
                if c.proc.poll() is not None:
                    raise RuntimeError("candidate %s exited %s before leading" % (c.ident, c.proc.returncode))
            time.sleep(0.002)
        raise TimeoutError("no new leader within %s s" % self.a.limit)

    def command_pidfd(self, c):
        return c.pidfd if self.a.kind == "proclaim" else os.pidfd_open(c.lead[1])

    def end_cleanly(self, c, rec):
        """Ends leader c's term on its own; returns when it ended (ns)."""
        if self.a.kind == "proclaim":
            t = time.time_ns()
            c.proc.send_signal(signal.SIGTERM)
            return t
        fd = os.pidfd_open(c.lead[1])
        try:
            os.kill(c.lead[1], signal.SIGUSR1)
            seen = wait_readable(fd, self.a.limit)
        finally:
            os.close(fd)
        self.poll_log()  # the end stamp was written before the exit
        if c.end is None:
            raise RuntimeError("candidate %s's command exited without its end stamp" % c.ident)
        rec.setdefault("observer_lag_ms", []).append((seen - c.end) / 1e6)
        return c.end

    def run(self):
        rec = {"row": self.a.row, "ttl": self.a.ttl, "key": self.key}
        try:
            a = self.start("A")
            self.next_leader([a])
            b = self.start("B")
            time.sleep(self.a.settle)
            c = self.start("C")
            time.sleep(self.a.settle + random.uniform(0, self.a.jitter))
            # kill -9 of the leader's process: its command dies with it (dlock's guard)
            fd = self.command_pidfd(a)
            t_kill = time.time_ns()
            a.proc.send_signal(signal.SIGKILL)
            t_dead = wait_readable(fd, self.a.limit)
            if fd != a.pidfd:
                os.close(fd)
            x = self.next_leader([b, c])
            rec["kill_to_dead_ms"] = (t_dead - t_kill) / 1e6
            rec["failover_ms"] = (x.lead[0] - t_dead) / 1e6
            # clean hand-over: the new leader's command exits 0
            y_among = [b, c]
            y_among.remove(x)
            t_end = self.end_cleanly(x, rec)
            y = self.next_leader(y_among)
            rec["handover_ms"] = (y.lead[0] - t_end) / 1e6
            self.end_cleanly(y, rec)
            rec["exits"] = {}
            for k in self.cands:
                k.proc.wait(timeout=self.a.limit)
                rec["exits"][k.ident] = k.proc.returncode
        except Exception as e:  # the round is reported failed; the next one goes on
            rec["error"] = "%s: %s" % (type(e).__name__, e)
        finally:
            for k in self.cands:
                if k.proc.poll() is None:
                    k.proc.kill()  # dlock's guard kills its command
                    k.proc.wait()
                k.close()
            self.err.close()
        return rec


def rounds(argv):
    import argparse
    p = argparse.ArgumentParser(prog="failover.py rounds")
    for name in ("out", "row", "ttl"):
        p.add_argument(name)
    p.add_argument("rounds", type=int)
    p.add_argument("kind", choices=("command", "proclaim"))
    p.add_argument("dir")
    p.add_argument("--settle", type=float, default=1.0)
    p.add_argument("--jitter", type=float, default=0.0)
    p.add_argument("--limit", type=float, default=60.0)
    p.add_argument("--parallel", action="store_true")
    p.add_argument("template", nargs="+")
    args = p.parse_args(argv)
    recs = [None] * args.rounds
    try:  # a prompt observer of the pidfds; the candidates are started at normal priority
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(1))
    except (OSError, AttributeError):
        pass

    def one(i):
        recs[i] = Round(args, i + 1).run()
        r = recs[i]
        if "error" in r:
            msg = "FAILED: " + r["error"]
        else:
            lag = r.get("observer_lag_ms")
            msg = "kill -9: command dead after %.1f ms, new command after %.1f ms more; clean hand-over %.1f ms%s; exits %s" % (
                r["kill_to_dead_ms"], r["failover_ms"], r["handover_ms"],
                " (pidfd seen %.1f ms late)" % max(lag) if lag else "",
                " ".join("%s=%s" % kv for kv in sorted(r["exits"].items())))
        print("  %-16s round %d: %s" % (args.row, i + 1, msg), flush=True)

    if args.parallel:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(args.rounds)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for i in range(args.rounds):
            one(i)
    with open(args.out, "a") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


def table(argv):
    rows = {}
    with open(argv[0]) as f:
        for line in f:
            r = json.loads(line)
            rows.setdefault(r["row"], []).append(r)

    def stat(vals):
        if not vals:
            return "-"
        return "%s / %s" % (fmt(statistics.median(vals)), fmt(max(vals)))

    def fmt(ms):
        return "%.0f" % ms if abs(ms) >= 100 else "%.1f" % ms

    print("| store | TTL | kill -9 fail-over, ms (median / max) | clean hand-over, ms (median / max) | rounds |")
    print("|---|---|---|---|---|")
    notes = []
    for row, recs in rows.items():
        ok = [r for r in recs if "error" not in r]
        fo = [r["failover_ms"] for r in ok]
        ho = [r["handover_ms"] for r in ok]
        done = "%d" % len(ok) + ("" if len(ok) == len(recs) else " of %d" % len(recs))
        print("| %s | %s | %s | %s | %s |" % (row, recs[0]["ttl"], stat(fo), stat(ho), done))
        early = [v for v in fo + ho if v < 0]
        if early:
            notes.append("%s: %d hand-over(s) timed negative (down to %.2f ms): the new command's stamp came"
                         " before this script saw the old one's exit through its pidfd" % (row, len(early), min(early)))
        for r in recs:
            if "error" in r:
                notes.append("%s, %s: %s" % (row, r["key"], r["error"]))
    for n in notes:
        print("\n- " + n, end="")
    if notes:
        print()


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "rounds":
        rounds(sys.argv[2:])
    elif len(sys.argv) >= 3 and sys.argv[1] == "table":
        table(sys.argv[2:])
    else:
        sys.exit(__doc__)
