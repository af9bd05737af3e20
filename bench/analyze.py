#!/usr/bin/env python3
"""Number crunching and printing for bench/run.sh and bench/stores.sh.

Each subcommand reads the raw files one step of run.sh produced, prints that step's table and
records its figures in a JSON results file, from which `summary` prints the final table.
Only the Python standard library is used.
"""
import json
import math
import os
import re
import statistics
import sys

# --------------------------------------------------------------------------------------- helpers


def load(path):
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {}


def save(path, data):
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


def record(path, section, key, value):
    data = load(path)
    data.setdefault(section, {})[key] = value
    save(path, data)


def pct(values, p):
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    s = sorted(values)
    k = max(0, math.ceil(p / 100.0 * len(s)) - 1)
    return s[k]


def ms(ns):
    return ns / 1e6


def stats_ms(values_ns):
    v = [ms(x) for x in values_ns]
    return {
        "n": len(v),
        "median": statistics.median(v),
        "mean": statistics.fmean(v),
        "p90": pct(v, 90),
        "p99": pct(v, 99),
        "min": min(v),
        "max": max(v),
    }


def monitor_lines(path):
    """Yields (ts_ns, source, command_lower, args) for each line of a redis-cli MONITOR capture."""
    rx = re.compile(r'^(\d+)\.(\d+) \[(\d+) ([^\]]*)\] (.*)$')
    with open(path, errors="replace") as f:
        for line in f:
            m = rx.match(line.rstrip("\n"))
            if not m:
                continue
            ts = int(m.group(1)) * 1_000_000_000 + int(m.group(2).ljust(6, "0")[:6]) * 1000
            toks = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(5))
            if not toks:
                continue
            yield ts, m.group(4), toks[0].lower(), toks[1:]


def read_commandstats(path, field="calls"):
    """{command: calls} (or usec) from INFO commandstats output."""
    out = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r"^cmdstat_([^:]+):calls=(\d+),usec=(\d+)", line.strip())
            if m:
                out[m.group(1)] = int(m.group(2) if field == "calls" else m.group(3))
    return out


# --------------------------------------------------------------------------------- subcommands


def cmd_uncontended(results, hf_json):
    with open(hf_json) as f:
        data = json.load(f)
    print(f"  {'command':<34} {'median':>9} {'mean':>9} {'stddev':>8} {'min':>8} {'max':>8}"
          f" {'user+sys':>9}  runs")
    out = {}
    for r in data["results"]:
        name = r["command"]
        row = {k: r[k] * 1000 for k in ("median", "mean", "stddev", "min", "max")}
        row["runs"] = len(r["times"])
        row["cpu"] = (r.get("user", 0) + r.get("system", 0)) * 1000
        out[name] = row
        print(f"  {name:<34} {row['median']:7.2f}ms {row['mean']:7.2f}ms {row['stddev']:6.2f}ms"
              f" {row['min']:6.2f}ms {row['max']:6.2f}ms {row['cpu']:7.2f}ms  {row['runs']}")
    record(results, "uncontended", "rows", out)


def cmd_contention(results, tool, label, start_ns, cycles, server_cpu_s, *outfiles):
    """One round of one tool. server_cpu_s: CPU seconds redis-server and etcd used meanwhile.
    Rounds of the same tool add up: ms per critical section = sum of walls / sum of sections."""
    start_ns, cycles = int(start_ns), int(cycles)
    ends, failed, bad, client_cpu = [], 0, [], 0
    for p in outfiles:
        with open(p) as f:
            text = f.read().split()
        if len(text) < 4:
            print(f"  {tool}: worker output {p} is empty (worker killed by the time limit?)")
            failed += cycles
            continue
        ends.append(int(text[0]))
        failed += int(text[1])
        if int(text[1]):
            bad.append(int(text[2]))
        client_cpu += int(text[3])
    total = cycles * len(outfiles)
    wall = (max(ends) - start_ns) if ends else float("nan")
    per = ms(wall) / total
    ccpu = ms(client_cpu) / total
    scpu = float(server_cpu_s) * 1000 / total
    print(f"  {label:<8} {tool:<26} {total:>4} critical sections in {wall / 1e9:6.2f} s ->"
          f" {per:6.2f} ms each;  CPU each: clients {ccpu:5.2f} ms + servers {scpu:5.2f} ms"
          f"   failed runs: {failed}" + (f" (e.g. exit {bad[-1]})" if bad else ""))
    data = load(results)
    entry = data.setdefault("contention", {}).setdefault(tool, {"rounds": []})
    entry["rounds"].append({"ms_per_cs": per, "wall_s": wall / 1e9, "cs": total, "failed": failed,
                            "client_cpu_ms": ccpu, "server_cpu_ms": scpu})
    rs = entry["rounds"]
    cs = sum(r["cs"] for r in rs)
    entry.update({
        "cs": cs,
        "failed": sum(r["failed"] for r in rs),
        "ms_per_cs": sum(r["wall_s"] for r in rs) * 1000 / cs,
        "client_cpu_ms": sum(r["client_cpu_ms"] * r["cs"] for r in rs) / cs,
        "server_cpu_ms": sum(r["server_cpu_ms"] * r["cs"] for r in rs) / cs,
    })
    save(results, data)


def cmd_contention_ratio(results, *tools):
    c = load(results).get("contention", {})
    print(f"  all rounds together:")
    for t in tools:
        if t in c:
            x = c[t]
            print(f"  {t:<35} {x['cs']:>5} critical sections: {x['ms_per_cs']:6.2f} ms each;"
                  f"  CPU each: clients {x['client_cpu_ms']:5.2f} ms + servers {x['server_cpu_ms']:5.2f} ms;"
                  f"  failed runs: {x['failed']}")
    if "dlock" in c and "flock" in c:
        r = c["dlock"]["ms_per_cs"] / c["flock"]["ms_per_cs"]
        per_round = [d["ms_per_cs"] / f["ms_per_cs"]
                     for d, f in zip(c["dlock"]["rounds"], c["flock"]["rounds"])]
        print(f"  dlock / flock = {c['dlock']['ms_per_cs']:.2f} / {c['flock']['ms_per_cs']:.2f}"
              f" = {r:.2f}   (target <= 1.5; round by round: "
              + ", ".join(f"{x:.2f}" for x in per_round) + ")")
        cd = c["dlock"]["client_cpu_ms"] + c["dlock"]["server_cpu_ms"]
        cf = c["flock"]["client_cpu_ms"] + c["flock"]["server_cpu_ms"]
        print(f"  CPU per critical section (clients + servers): dlock {cd:.2f} ms / flock {cf:.2f} ms"
              f" = {cd / cf:.2f}  (when both are CPU-bound the time ratio follows this)")
        record(results, "contention", "ratio", r)
        record(results, "contention", "ratio_rounds", per_round)
        record(results, "contention", "cpu_ratio", cd / cf)
    if "etcdctl lock" in c and "dlock" in c:
        print(f"  etcdctl lock / dlock = {c['etcdctl lock']['ms_per_cs'] / c['dlock']['ms_per_cs']:.2f}")


def parse_stamps(path):
    rows = []
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) == 3:
                rows.append((int(p[0]), int(p[1]), p[2]))
    rows.sort()
    return rows


def handover_pairs(rows):
    """Consecutive critical sections while every worker was still looping.

    Returns (pairs, overlaps, same_worker); a pair is (prev_end, next_start)."""
    last_end = {}
    for s, e, w in rows:
        last_end[w] = max(last_end.get(w, 0), e)
    cutoff = min(last_end.values())  # the first worker to finish its loop
    pairs, overlaps, same = [], 0, 0
    for (s0, e0, w0), (s1, e1, w1) in zip(rows, rows[1:]):
        if s1 < e0:
            overlaps += 1
        if e0 >= cutoff:
            continue
        if w0 == w1:
            same += 1  # the holder's own loop started a new process that won: not a hand-over
            continue
        pairs.append((e0, s1))
    return pairs, overlaps, same


def cmd_handover(results, tool, stamp_log, monitor=None, acq_sha=None, rel_sha=None):
    rows = parse_stamps(stamp_log)
    overlaps_all = 0
    if len(rows) < 3:
        print(f"  {tool}: only {len(rows)} critical sections recorded")
        record(results, "handover", tool, {"n": 0})
        return
    pairs, overlaps, same = handover_pairs(rows)
    overlaps_all = overlaps
    gaps = [s1 - e0 for e0, s1 in pairs]
    st = stats_ms(gaps)
    st.update({"overlaps": overlaps_all, "same_worker": same, "critical_sections": len(rows)})
    print(f"  {tool:<32} n={st['n']:<4} median {st['median']:7.2f} ms   p90 {st['p90']:7.2f} ms"
          f"   p99 {st['p99']:7.2f} ms   mean {st['mean']:7.2f} ms   max {st['max']:7.2f} ms")
    extra = []
    if same:
        extra.append(f"{same} pairs skipped because the releasing worker's next process won")
    if overlaps_all:
        extra.append(f"MUTUAL EXCLUSION VIOLATED: {overlaps_all} overlapping critical sections")
    for x in extra:
        print(f"  {'':<32} ({x})")
    if monitor:
        acq, rel = [], []
        for ts, src, cmd, args in monitor_lines(monitor):
            if src == "lua" or cmd != "evalsha" or not args:
                continue
            if args[0] == acq_sha:
                acq.append(ts)
            elif args[0] == rel_sha:
                rel.append(ts)
        import bisect
        a_part, b_part, c_part, missing = [], [], [], 0
        for e0, s1 in pairs:
            i = bisect.bisect_left(rel, e0)
            if i >= len(rel) or rel[i] > s1:
                missing += 1
                continue
            j = bisect.bisect_left(acq, rel[i])
            if j >= len(acq) or acq[j] > s1:
                missing += 1
                continue
            a_part.append(rel[i] - e0)
            b_part.append(acq[j] - rel[i])
            c_part.append(s1 - acq[j])
        if a_part:
            parts = {"exit_to_release": stats_ms(a_part), "release_to_acquire": stats_ms(b_part),
                     "acquire_to_start": stats_ms(c_part)}
            st["parts"] = parts
            labels = {
                "exit_to_release": "A  holder's command exits -> release EVALSHA reaches Redis",
                "release_to_acquire": "B  release EVALSHA -> next acquire EVALSHA (lock-to-lock)",
                "acquire_to_start": "C  acquire EVALSHA -> next command's main() (fork+exec)",
            }
            print(f"    decomposition from Redis MONITOR timestamps (n={len(a_part)}"
                  + (f", {missing} not matched" if missing else "") + "):")
            for k, label in labels.items():
                p = parts[k]
                print(f"      {label:<60} median {p['median']:6.2f} ms  p99 {p['p99']:6.2f} ms")
    record(results, "handover", tool, st)


def cmd_baseline(results, spawnlat_file, hf_json):
    starts, totals = [], []
    with open(spawnlat_file) as f:
        for line in f:
            p = line.split()
            if len(p) == 2:
                starts.append(int(p[0]))
                totals.append(int(p[1]))
    s, t = stats_ms(starts), stats_ms(totals)
    with open(hf_json) as f:
        r = json.load(f)["results"][0]
    sh_med, sh_mean = r["median"] * 1000, r["mean"] * 1000
    print(f"  posix_spawn -> main() of the static stamp helper   median {s['median']:6.2f} ms"
          f"   p99 {s['p99']:6.2f} ms   (spawn -> reaped: median {t['median']:.2f} ms; n={s['n']})")
    print(f"  sh -c 'date +%s%N' (hyperfine -N, whole run)       median {sh_med:6.2f} ms"
          f"   mean {sh_mean:6.2f} ms")
    record(results, "handover", "baseline", {"spawn_to_main": s, "spawn_to_reaped": t,
                                             "sh_date_median": sh_med, "sh_date_mean": sh_mean})


def cmd_cmdstats(results, label, units, info_file, monitor_file, acq_sha="", rel_sha="",
                 renew_sha=""):
    """Commands per unit (critical section, or waiter) from INFO commandstats; MONITOR tells which
    of them Lua scripts issued."""
    units = int(units)
    calls = read_commandstats(info_file)
    mine = {"config|resetstat", "info", "monitor"}  # what run.sh itself sends
    ignored = {k: v for k, v in calls.items() if k in mine}
    calls = {k: v for k, v in calls.items() if k not in mine}
    lua, client_seen, client_seq = {}, {}, []
    first_ts = None
    if monitor_file and os.path.exists(monitor_file):
        for ts, src, cmd, args in monitor_lines(monitor_file):
            if cmd == "info" and src != "lua":
                break  # run.sh's INFO commandstats: the counts end here
            if src == "lua":
                lua[cmd] = lua.get(cmd, 0) + 1
                continue
            if cmd in ("monitor", "config"):
                continue
            name = cmd
            if cmd == "evalsha" and args:
                name = {acq_sha: "evalsha(acquire)", rel_sha: "evalsha(release)",
                        renew_sha: "evalsha(renew)"}.get(args[0], "evalsha(other)")
            client_seen[name] = client_seen.get(name, 0) + 1
            if first_ts is None:
                first_ts = ts
            client_seq.append((ts - first_ts, name, src, args))
    rows = []
    for k in sorted(calls, key=lambda k: (-calls[k], k)):
        n_lua = lua.get(k, 0)
        rows.append((k, calls[k], n_lua, calls[k] - n_lua))
    total = sum(r[1] for r in rows)
    client = sum(r[3] for r in rows)
    print(f"  {'command':<22} {'calls':>8} {'in Lua':>8} {'client':>8} {'per unit':>9}")
    for k, c, l, cl in rows:
        print(f"  {k:<22} {c:>8} {l:>8} {cl:>8} {c / units:>9.2f}")
    print(f"  {'-' * 59}")
    print(f"  client-issued commands: {client} = {client / units:.2f} per unit;"
          f"   including those run inside Lua: {total} = {total / units:.2f} per unit  (unit count {units})")
    if client_seen:
        parts = ", ".join(f"{k} {v / units:.2f}" for k, v in sorted(client_seen.items()))
        print(f"  client commands per unit by kind (MONITOR): {parts}")
    if ignored:
        print("  (not counted, issued by this script: " +
              ", ".join(f"{k} {v}" for k, v in sorted(ignored.items())) + ")")
    entry = {"client": client, "total": total, "units": units,
             "client_per_unit": client / units, "total_per_unit": total / units,
             "by_command": {r[0]: {"calls": r[1], "lua": r[2], "client": r[3]} for r in rows},
             "client_by_kind": client_seen}
    if label == "waiter5s" and client_seq:
        print("  client commands seen by MONITOR, in order (time from the first):")
        for t, name, src, args in client_seq[:20]:
            arg = ""
            if name == "blpop" and len(args) >= 2:
                arg = f" timeout {args[-1]} s"
            print(f"    +{t / 1e9:7.3f} s  {name}{arg}   [{src}]")
        if len(client_seq) > 20:
            print(f"    ... {len(client_seq) - 20} more")
    record(results, "commands", label, entry)


def cmd_waiters(results, w, start_s, drain_s, cpu_before, cpu_after, codes_file, info_file,
                stderr_file):
    w = int(w)
    start_s, drain_s = float(start_s), float(drain_s)
    cpu = float(cpu_after) - float(cpu_before)
    codes = {}
    with open(codes_file) as f:
        for line in f:
            line = line.strip()
            if line:
                codes[line] = codes.get(line, 0) + 1
    ok = codes.get("0", 0)
    calls = read_commandstats(info_file)
    evalsha = calls.get("evalsha", 0) + calls.get("eval", 0)
    blpop = calls.get("blpop", 0)
    usec = read_commandstats(info_file, "usec")
    script_us = (usec.get("evalsha", 0) + usec.get("eval", 0)) / w
    errs = []
    if os.path.exists(stderr_file):
        with open(stderr_file, errors="replace") as f:
            errs = [l.rstrip() for l in f if l.strip()]
    per_ho_ms = drain_s * 1000 / w
    cpu_us = cpu * 1e6 / w
    print(f"  {w:>5} waiters: started and blocked in {start_s:6.2f} s; all ran in {drain_s:6.2f} s"
          f" = {per_ho_ms:6.2f} ms per hand-over;  Redis CPU {cpu * 1000:8.1f} ms"
          f" = {cpu_us:6.1f} us per hand-over")
    print(f"  {'':>5}          exit statuses: " + ", ".join(f"{k}: {v}" for k, v in sorted(codes.items()))
          + f";  during the drain per hand-over: EVAL(SHA) {evalsha / w:.2f} taking {script_us:.0f} us,"
          + f" BLPOP {blpop / w:.2f}"
          + f";  stderr lines: {len(errs)}")
    for e in errs[:5]:
        print(f"  {'':>16}stderr: {e}")
    record(results, "waiters", str(w), {"start_s": start_s, "drain_s": drain_s, "ok": ok,
                                        "codes": codes, "cpu_us_per_handover": cpu_us, "script_us_per_handover": script_us,
                                        "ms_per_handover": per_ho_ms, "stderr_lines": len(errs),
                                        "evalsha_per_handover": evalsha / w,
                                        "blpop_per_handover": blpop / w})


def cmd_rss(results, tool, *values):
    v = [int(x) for x in values if x.strip().isdigit()]
    if not v:
        print(f"  {tool:<40} no measurement")
        return
    print(f"  {tool:<40} median {statistics.median(v) / 1024:6.2f} MB   max {max(v) / 1024:6.2f} MB"
          f"   ({len(v)} runs, {min(v)}..{max(v)} kB)")
    record(results, "rss", tool, {"median_kb": statistics.median(v), "max_kb": max(v), "n": len(v)})


def cmd_load(results, when, value, cpus):
    record(results, "load", when, value)
    record(results, "load", "cpus", cpus)


def cmd_summary(results, mode):
    d = load(results)
    rows = []  # (what, target, value, verdict)

    def verdict(ok):
        return "REACHED" if ok else "MISSED"

    c = d.get("contention", {})
    if "ratio" in c:
        r = c["ratio"]
        rows.append(("contention: dlock / flock time per critical section", "<= 1.5",
                     f"{r:.2f} ({c['dlock']['ms_per_cs']:.2f} / {c['flock']['ms_per_cs']:.2f} ms)",
                     verdict(r <= 1.5)))
        rr = c.get("ratio_rounds", [])
        if len(rr) > 1:
            rows.append(("  the same, round by round", "",
                         ", ".join(f"{x:.2f}" for x in rr), ""))
        if "cpu_ratio" in c:
            rows.append(("  CPU per critical section, dlock / flock", "",
                         f"{c['cpu_ratio']:.2f} ({c['dlock']['client_cpu_ms'] + c['dlock']['server_cpu_ms']:.1f}"
                         f" / {c['flock']['client_cpu_ms'] + c['flock']['server_cpu_ms']:.1f} ms)", ""))
    cm = d.get("commands", {})
    if "contention" in cm:
        x = cm["contention"]
        rows.append(("Redis commands per critical section (client-issued)", "<= 6",
                     f"{x['client_per_unit']:.2f} (incl. Lua-internal: {x['total_per_unit']:.2f})",
                     verdict(x["client_per_unit"] <= 6)))
    if "waiter5s" in cm:
        x = cm["waiter5s"]
        rows.append(("Redis commands, one waiter waiting 5 s (client-issued)", "<= 4",
                     f"{x['client']} (incl. Lua-internal: {x['total']})", verdict(x["client"] <= 4)))
    ws = d.get("waiters", {})
    for w in sorted(ws, key=int):
        x = ws[w]
        rows.append((f"{w} waiters on one key: every one got the lock, exit 0", f"{w}/{w}",
                     f"{x['ok']}/{w} in {x['drain_s']:.1f} s", verdict(x["ok"] == int(w))))
    if len(ws) >= 2:
        ks = sorted(ws, key=int)
        lo, hi = ws[ks[0]]["cpu_us_per_handover"], ws[ks[-1]]["cpu_us_per_handover"]
        vals = " / ".join(f"{ws[k]['cpu_us_per_handover']:.0f}" for k in ks)
        rows.append((f"Redis CPU us per hand-over at {' / '.join(ks)} waiters",
                     "flat (last <= 2x first)", f"{vals} us",
                     verdict(hi <= 2 * lo) + " (informal)"))
    rss = d.get("rss", {})
    if "dlock run -k K -- true" in rss:
        x = rss["dlock run -k K -- true"]
        fl = rss.get("flock FILE true", {}).get("max_kb")
        rows.append(("peak RSS of dlock run -k K -- true", "< 8 MB",
                     f"{x['max_kb'] / 1024:.2f} MB" + (f" (flock {fl / 1024:.2f} MB)" if fl else ""),
                     verdict(x["max_kb"] < 8 * 1024)))
    ho = d.get("handover", {})
    bad = sum(v.get("overlaps", 0) for k, v in ho.items() if isinstance(v, dict))
    if ho:
        rows.append(("mutual exclusion (no overlapping critical sections seen)", "0", str(bad),
                     verdict(bad == 0)))
    print(f"  {'what':<58} {'target':<24} {'measured':<42} result")
    print(f"  {'-' * 58} {'-' * 24} {'-' * 42} {'-' * 7}")
    for what, target, value, v in rows:
        print(f"  {what:<58} {target:<24} {value:<42} {v}")
    print()
    print("  for information (no target):")
    u = d.get("uncontended", {}).get("rows", {})
    if u:
        print("    uncontended cycle, median / mean: " + ";  ".join(
            f"{k} {v['median']:.1f} / {v['mean']:.1f} ms" for k, v in u.items()))
    if c:
        print("    contention, ms per critical section: " + ";  ".join(
            f"{k} {v['ms_per_cs']:.2f}" for k, v in c.items() if isinstance(v, dict)))
    la = d.get("load", {})
    if la:
        print(f"    load average (1 min) at start {la.get('start', '?')}, at end {la.get('end', '?')},"
              f" on {la.get('cpus', '?')} CPUs")
        try:
            if max(float(la["start"]), float(la["end"])) > float(la["cpus"]):
                print("    NOTE: the machine was busy with other work while this ran; absolute times are"
                      " inflated and noisy, side-by-side ratios less so")
        except (KeyError, ValueError):
            pass
    if ho:
        parts = []
        for k, v in ho.items():
            if k == "baseline" or not v.get("n"):
                continue
            parts.append(f"{k} {v['median']:.2f} / {v['p99']:.2f} ms")
        print("    hand-over, median / p99: " + ";  ".join(parts))
        b = ho.get("baseline")
        if b:
            print(f"    process start baseline: spawn->main {b['spawn_to_main']['median']:.2f} ms,"
                  f" sh -c 'date +%s%N' {b['sh_date_median']:.2f} ms (medians)")
    print(f"    mode: {mode}")


def cmd_stores(results, *tools):
    """bench/stores.sh's closing table: one row per tool, every section side by side."""
    d = load(results)
    u = d.get("uncontended", {}).get("rows", {})
    c = d.get("contention", {})
    ho = d.get("handover", {})
    rss = d.get("rss", {})

    def cell(value, fmt):
        return fmt % value if value is not None else "-"

    print(f"  {'tool':<28} {'uncontended cycle':>19} {'8 workers contending':>21}"
          f" {'hand-over':>19} {'peak RSS':>9}  failed runs")
    print(f"  {'':<28} {'median / mean ms':>19} {'ms per section':>21} {'median / p90 ms':>19}"
          f" {'MB':>9}")
    for t in tools:
        un, co, h, r = u.get(t), c.get(t), ho.get(t), rss.get(t)
        cycle = f"{un['median']:.2f} / {un['mean']:.2f}" if un else "-"
        per = cell(co["ms_per_cs"] if co else None, "%.2f")
        hand = f"{h['median']:.2f} / {h['p90']:.2f}" if h and h.get("n") else "-"
        mem = cell(r["max_kb"] / 1024 if r else None, "%.2f")
        failed = co["failed"] if co else 0
        overlaps = h.get("overlaps", 0) if h else 0
        print(f"  {t:<28} {cycle:>19} {per:>21} {hand:>19} {mem:>9}  {failed}"
              + (f"  MUTUAL EXCLUSION VIOLATED ({overlaps} overlaps)" if overlaps else ""))
    base = u.get("true (no lock: process start)")
    if base:
        print(f"  process start alone (true): {base['median']:.2f} ms median")
    la = d.get("load", {})
    if la:
        print(f"  load average (1 min) at start {la.get('start', '?')}, at end {la.get('end', '?')},"
              f" on {la.get('cpus', '?')} CPUs")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(64)
    sub, results, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    fn = globals().get("cmd_" + sub.replace("-", "_"))
    if not fn:
        sys.exit(f"unknown subcommand {sub}")
    fn(results, *rest)


if __name__ == "__main__":
    main()
