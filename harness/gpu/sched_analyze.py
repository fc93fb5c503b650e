"""Where the time goes: one sched_cases.sh run turned into figures (docs/benchmarks.md, "Where the
time goes").

  sched_analyze.py RUNDIR [--skip S] [--json]

RUNDIR holds one folder per case (sched_cases.sh). Cases whose pods all have limit 0 are the
unlimited references; every other case is judged against the reference of its mode nearest in
time (the card warms: a reference taken once, first, on a cool card reads high). Per case:

- each pod's share: its steps per second over the reference's, per 1 s window and per 10 s window
  after the first S seconds (default 2);
- the GPU's busy time from the stamps (the union of every pod's steps on the GPU's own clock), the
  idle time inside slices (a holder launching too slowly) and between slices (switches);
- per slice from the scheduler's trace beside the stamps: grant → the holder's first launch seen
  (join) → its first step on the GPU; revoke → drain reported; the GPU's idle gap to the next
  slice's first step; what the slice was charged against its wall time;
- the SM clock and power (nvidia-smi) and the speed the scheduler charged at.
"""
import argparse
import bisect
import datetime
import json
import os
import statistics
import sys


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_case(d):
    pods = []
    try:
        lines = open(os.path.join(d, "pods")).read().split("\n")
    except OSError:
        return None
    for line in lines:
        f = line.split()
        if len(f) == 5:
            name, mode, limit, policy, delay = f
            res = load_json(os.path.join(d, name + ".json"))
            pods.append({"name": name, "mode": mode, "limit": int(limit), "policy": policy, "delay": float(delay), "res": res})
    trace = []
    try:
        for line in open(os.path.join(d, "trace.jsonl")):
            try:
                trace.append(json.loads(line))
            except ValueError:
                pass
    except OSError:
        pass
    smi = []
    try:
        for line in open(os.path.join(d, "smi.csv")):
            f = [x.strip() for x in line.split(",")]
            try:
                # nvidia-smi stamps its rows in the machine's local time, as the workloads' clock
                # reads it (the analysis runs where the case ran).
                t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp() * 1e9
                smi.append((float(f[1]), float(f[2]), float(f[3]), float(f[4]), t))
            except (ValueError, IndexError):
                pass
    except OSError:
        pass
    start = None
    try:
        start = int(open(os.path.join(d, "start_ns")).read().strip())
    except (OSError, ValueError):
        pass
    return {"dir": d, "name": os.path.basename(d), "pods": pods, "trace": trace, "smi": smi, "start": start}


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def steps_host(p):
    """The pod's steps as host-clock intervals [(start, end)] (ns)."""
    r = p["res"]
    if not r or "stamps" not in r or r.get("gt_offset_ns") is None:
        return []
    off = r["gt_offset_ns"]
    return [(a - off, b - off) for a, b in r["stamps"] if a and b and b >= a]


def union(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def busy_in(u, lo, hi):
    s = 0
    for a, b in u:
        if b <= lo or a >= hi:
            continue
        s += min(b, hi) - max(a, lo)
    return s


def shares(p, ref_rate, skip):
    r = p["res"]
    if not r or not r.get("windows") or not ref_rate:
        return None
    ratios = [w / ref_rate for w in r["windows"]]
    after = ratios[int(skip):]
    tens = [mean(after[i:i + 10]) for i in range(0, max(1, len(after) - 9))] if len(after) >= 10 else ([mean(after)] if after else [])
    return {"one": ratios, "ten": tens}


def ref_rates(cases, skip):
    """Per mode, the references in run order: (case index, mean rate after skip)."""
    out = {}
    for i, c in enumerate(cases):
        if c["pods"] and all(p["limit"] == 0 for p in c["pods"]) and len(c["pods"]) == 1:
            p = c["pods"][0]
            if p["res"] and p["res"].get("windows"):
                w = p["res"]["windows"][int(skip):]
                out.setdefault(p["mode"], []).append((i, mean(w), c["name"]))
    return out


def nearest_ref(refs, mode, i):
    rs = refs.get(mode, [])
    if not rs:
        return None, None
    before = [r for r in rs if r[0] < i]
    after = [r for r in rs if r[0] > i]
    pick = ([before[-1]] if before else []) + ([after[0]] if after else [])
    return mean([r[1] for r in pick]), "+".join(r[2] for r in pick)


def slices_of(trace):
    """Slices from the trace: key → events, in grant order."""
    out, order = {}, []
    for e in trace:
        if e.get("ev") in ("clock", "calibrate", "learned") or not e.get("slice"):
            continue
        k = (e.get("c"), e["slice"])
        if k not in out:
            out[k] = {"c": e.get("c"), "slice": e["slice"]}
            order.append(k)
        out[k].setdefault(e["ev"], e)
    return [out[k] for k in order]


def slice_figures(c, lo, hi):
    """Per slice: the latencies and gaps on the host clock, from the trace and the stamps."""
    steps = {p["name"] + "_main": sorted(steps_host(p)) for p in c["pods"]}
    starts = {k: [s[0] for s in v] for k, v in steps.items()}
    sl = [s for s in slices_of(c["trace"]) if "grant" in s and lo <= s["grant"]["t"] <= hi]
    rows = []
    for i, s in enumerate(sl):
        g = s["grant"]["t"]
        st, ss = steps.get(s["c"], []), starts.get(s["c"], [])
        end_ev = s.get("drained") or s.get("released") or s.get("overlap") or s.get("unjoined")
        end = end_ev["t"] if end_ev else None
        nxt = sl[i + 1]["grant"]["t"] if i + 1 < len(sl) else None
        # The first step that starts on the GPU after the grant, the last that ends before the
        # next grant's first step.
        j = bisect.bisect_left(ss, g)
        first = st[j][0] if j < len(st) and (nxt is None or st[j][0] < nxt + 50_000_000) else None
        last = None
        if first is not None:
            k = j
            lim = (nxt + 5_000_000) if nxt else hi
            while k + 1 < len(st) and st[k + 1][0] < lim:
                k += 1
            last = st[k][1]
        row = {
            "c": s["c"],
            "join_ms": (s["join"]["t"] - g) / 1e6 if "join" in s else None,
            "first_gpu_ms": (first - g) / 1e6 if first else None,
            "revoke_to_drain_ms": (s["drained"]["t"] - s["revoke"]["t"]) / 1e6 if "drained" in s and "revoke" in s else None,
            "wall_ms": (end - g) / 1e6 if end else None,
            "budget_ms": s["grant"].get("budget_us", 0) / 1e3,
            "spent_ms": (end_ev or {}).get("spent_us", 0) / 1e3,
            "speed": s["grant"].get("speed"),
            "first": first, "last": last, "grant": g, "end": end,
        }
        rows.append(row)
    for a, b in zip(rows, rows[1:]):
        if a["last"] and b["first"]:
            a["gap_to_next_ms"] = (b["first"] - a["last"]) / 1e6
    return rows


def summarize(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    vals.sort()
    return {"n": len(vals), "mean": round(mean(vals), 3), "p50": round(vals[len(vals) // 2], 3),
            "p90": round(vals[int(len(vals) * 0.9)], 3), "max": round(vals[-1], 3)}


def analyze_case(c, refs, idx, skip):
    out = {"case": c["name"], "pods": []}
    t_lo, t_hi = None, None
    for p in c["pods"]:
        rate, refname = nearest_ref(refs, p["mode"], idx)
        sh = shares(p, rate, skip) if p["limit"] > 0 else None
        r = p["res"] or {}
        out["pods"].append({"pod": p["name"], "mode": p["mode"], "limit": p["limit"], "policy": p["policy"], "delay": p["delay"],
                            "ref": refname, "ref_rate": rate, "shares": sh, "error": None if p["res"] else "no result"})
        if r.get("window_end_ns"):
            ends = r["window_end_ns"]
            lo = ends[min(int(skip), len(ends) - 1)] - 1e9 if len(ends) > skip else ends[0] - 1e9
            t_lo = lo if t_lo is None else max(t_lo, lo)
            t_hi = ends[-1] if t_hi is None else min(t_hi, ends[-1])
    if t_lo is None or t_hi is None or t_hi <= t_lo:
        return out
    allsteps = [s for p in c["pods"] for s in steps_host(p)]
    u = union(allsteps)
    wall = t_hi - t_lo
    if allsteps:
        out["gpu_busy"] = round(busy_in(u, t_lo, t_hi) / wall, 4)
        out["overlap_window_s"] = round(wall / 1e9, 2)
    if c["trace"]:
        rows = [r for r in slice_figures(c, t_lo, t_hi)]
        out["slices"] = len(rows)
        for key in ("join_ms", "first_gpu_ms", "revoke_to_drain_ms", "gap_to_next_ms", "wall_ms", "budget_ms", "spent_ms"):
            out[key] = summarize([r.get(key) for r in rows])
        # The GPU's time split: steps inside slices, gaps between a slice's last step and the
        # next slice's first, idle inside slices.
        between = sum(max(r.get("gap_to_next_ms") or 0, 0) for r in rows) * 1e6
        out["idle_between_slices"] = round(between / wall, 4)
        if "gpu_busy" in out:
            out["idle_inside_slices"] = round(1 - out["gpu_busy"] - between / wall, 4)
        per = {}
        for r in rows:
            d = per.setdefault(r["c"], {"slices": 0, "wall_ms": 0.0, "spent_ms": 0.0, "budget_ms": 0.0})
            d["slices"] += 1
            d["wall_ms"] += r["wall_ms"] or 0
            d["spent_ms"] += r["spent_ms"] or 0
            d["budget_ms"] += r["budget_ms"] or 0
        for k, d in per.items():
            d["wall_share"] = round(d["wall_ms"] * 1e6 / wall, 4)
            d["charged_share"] = round(d["spent_ms"] * 1e6 / wall, 4)
        out["per_container"] = per
        clk = [e for e in c["trace"] if e.get("ev") == "clock" and t_lo <= e["t"] <= t_hi]
        out["sched_clock_mhz"] = round(mean([e["clk"] for e in clk]), 1) if clk else None
        out["sched_speed"] = round(mean([e["speed"] for e in clk]), 4) if clk else None
        full = [e.get("full") for e in c["trace"] if e.get("ev") == "learned"]
        out["full_load_mhz_learned"] = full
        out["calibrations"] = sum(1 for e in c["trace"] if e.get("ev") == "calibrate")
    if c["smi"]:
        # Over the judged span only: the seconds before the workloads start (PyTorch loading, the
        # GPU idle at its lowest clock) are not the load's (averaged in, a full-load reference read
        # 1253 MHz for 1400).
        body = [s for s in c["smi"] if t_lo <= s[4] <= t_hi]
        if not body:
            print("sched_analyze: %s: no nvidia-smi row inside the judged span (its clock is the machine's local time?)"
                  % c["name"], file=sys.stderr)
    if c["smi"] and body:
        out["smi_sm_mhz"] = round(mean([s[0] for s in body]), 1)
        out["smi_power_w"] = round(mean([s[1] for s in body]), 1)
        out["smi_temp_c"] = round(mean([s[2] for s in body]), 1)
        out["smi_util"] = round(mean([s[3] for s in body]), 1)
    return out


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "%.3f" % v
    return str(v)


def worst(ten, limit):
    """The 10 s window farthest from the limit."""
    return max(ten, key=lambda x: abs(x - limit)) if ten else None


def tsv(res):
    """Lines for the GPU tier's sched section (harness/gpu/sections/sched.sh):
    pod CASE POD MODE LIMIT POLICY DELAY WORST10 MEAN ONE_S...   (shares of the pod's reference)
    case CASE GPU_BUSY IDLE_BETWEEN SUM_LIMITS SUM_MEANS SLICES"""
    out = []
    for r in res:
        sum_l = sum_m = 0.0
        every = True
        for p in r["pods"]:
            if p["limit"] <= 0:
                continue
            sh = p["shares"]
            if not sh or not sh["ten"]:
                every = False
                out.append("pod\t%s\t%s\t%s\t%d\t%s\t%g\t-\t-\t%s" % (r["case"], p["pod"], p["mode"], p["limit"], p["policy"], p["delay"], p["error"] or "no reference"))
                continue
            after = sh["one"][2:]
            mean_ = sum(after) / len(after) if after else 0
            sum_l += p["limit"] / 100.0
            sum_m += mean_
            out.append("pod\t%s\t%s\t%s\t%d\t%s\t%g\t%.4f\t%.4f\t%s" % (r["case"], p["pod"], p["mode"], p["limit"], p["policy"], p["delay"],
                       worst(sh["ten"], p["limit"] / 100.0), mean_, " ".join("%.4f" % x for x in sh["one"])))
        if sum_l > 0:
            out.append("case\t%s\t%s\t%s\t%.4f\t%s\t%s" % (r["case"], fmt(r.get("gpu_busy")), fmt(r.get("idle_between_slices")), sum_l,
                       "%.4f" % sum_m if every else "-", r.get("slices", "-")))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rundir")
    ap.add_argument("--skip", type=float, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--tsv", action="store_true")
    a = ap.parse_args()
    names = sorted(os.listdir(a.rundir), key=lambda n: os.path.getmtime(os.path.join(a.rundir, n, "start_ns")) if os.path.exists(os.path.join(a.rundir, n, "start_ns")) else 0)
    cases = [c for c in (load_case(os.path.join(a.rundir, n)) for n in names) if c]
    refs = ref_rates(cases, a.skip)
    res = [analyze_case(c, refs, i, a.skip) for i, c in enumerate(cases)]
    if a.json:
        print(json.dumps({"refs": refs, "cases": res}, indent=1))
        return 0
    if a.tsv:
        print(tsv(res))
        return 0
    for mode, rs in refs.items():
        print("reference %s: %s" % (mode, ", ".join("%s %.1f/s" % (r[2], r[1]) for r in rs)))
    for r in res:
        print("== %s" % r["case"])
        for p in r["pods"]:
            sh = p["shares"]
            if sh:
                print("  %s %s@%d/%s+%g: 10 s %s | 1 s %s" % (p["pod"], p["mode"], p["limit"], p["policy"], p["delay"],
                      " ".join("%.3f" % x for x in sh["ten"]), " ".join("%.2f" % x for x in sh["one"])))
            elif p["limit"] > 0:
                print("  %s %s@%d: %s" % (p["pod"], p["mode"], p["limit"], p["error"] or "no reference"))
        for k in ("gpu_busy", "idle_inside_slices", "idle_between_slices", "slices", "sched_clock_mhz", "sched_speed",
                  "full_load_mhz_learned", "calibrations", "smi_sm_mhz", "smi_power_w", "smi_temp_c", "smi_util"):
            if k in r:
                print("  %s: %s" % (k, fmt(r[k])))
        for k in ("join_ms", "first_gpu_ms", "revoke_to_drain_ms", "gap_to_next_ms", "wall_ms", "budget_ms", "spent_ms"):
            if r.get(k):
                print("  %s: %s" % (k, r[k]))
        for k, d in (r.get("per_container") or {}).items():
            print("  %s: %s" % (k, d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
