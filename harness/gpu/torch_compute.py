"""The compute limit under a real BLAS: PyTorch bf16 4096x4096 GEMMs, eager or replayed from a CUDA
graph, for the real-GPU job (scripts/gpu-check.sh runs it when `import torch` works there).

  torch_compute.py run --mode eager|graph --seconds S [--duty D]
      one JSON line: GEMMs per second per 1 s window; --duty D < 1 synchronises after each step of
      8 GEMMs and rests so that the GPU is busy about D of the time (a partial load)
  torch_compute.py judge UNLIMITED LIMITED --limit L [--tol T] [--at-least A] [--series FILE --line NAME]
      achieved/unlimited per 1 s and per 10 s window after the first 2 s; exit 1 when a 10 s window
      is outside L/100 +- T (or below A, for runs that must not be throttled). The line ends with
      "worst W": the 10 s window farthest from the bound's middle. --series appends every 1 s
      ratio to a GPU-tier series file as "second,NAME,ratio" (docs/gpu-report.md)

A window ends with torch.cuda.synchronize(), so its GEMMs have run when it is counted.
"""
import argparse
import json
import sys
import time


def run(mode, seconds, duty=1.0):
    import torch

    n = 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    per_step = 8
    step = lambda: [torch.matmul(a, b, out=out) for _ in range(per_step)]
    step()
    torch.cuda.synchronize()
    if mode == "graph":
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            step()  # warm-up on the capture stream, as PyTorch's documentation asks
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            step()
        step = g.replay
    windows = []
    t0 = time.monotonic()
    wstart, done = t0, 0
    while time.monotonic() - t0 < seconds:
        s0 = time.monotonic()
        step()
        done += per_step
        if duty < 1:
            torch.cuda.synchronize()
            time.sleep((time.monotonic() - s0) * (1 - duty) / duty)
        if time.monotonic() - wstart >= 1.0:
            torch.cuda.synchronize()
            t = time.monotonic()
            windows.append(done / (t - wstart))
            wstart, done = t, 0
    print(json.dumps({"mode": mode, "gemm": n, "windows": windows}))


def judge(unlimited, limited, limit, tol, at_least, series=None, line=None):
    u = json.load(open(unlimited))["windows"]
    u = u[2:] or u  # a run too short to leave its first 2 s out is judged whole
    w = json.load(open(limited))["windows"]
    if not u or not w:
        print("no 1 s window in %s: the runs are too short (at least 3 s)" % (unlimited if not u else limited))
        return 2
    ratios = [x / base for x in w]
    after = ratios[2:]
    longs = [sum(after[i:i + 10]) / 10 for i in range(0, max(1, len(after) - 9))] if len(after) >= 10 else [sum(after) / len(after)]
    lo, hi = (at_least, 10.0) if at_least else (limit / 100 - tol, limit / 100 + tol)
    ok = all(lo <= x <= hi for x in longs)
    mid = (lo + min(hi, 1.0)) / 2
    worst = max(longs, key=lambda x: abs(x - mid))
    print("unlimited %.1f GEMM/s; 1 s: %s; 10 s: %s; want %.2f..%.2f: %s; worst %.4f" % (
        base, " ".join("%.3f" % x for x in ratios), " ".join("%.3f" % x for x in longs), lo, min(hi, 9.99),
        "within" if ok else "outside", worst))
    if series:
        with open(series, "a") as f:
            for i, x in enumerate(ratios):
                f.write("%d,%s,%.4f\n" % (i + 1, line.replace(",", " "), x))
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--mode", choices=["eager", "graph"], required=True)
    r.add_argument("--seconds", type=float, default=15)
    r.add_argument("--duty", type=float, default=1.0)
    j = sub.add_parser("judge")
    j.add_argument("unlimited")
    j.add_argument("limited")
    j.add_argument("--limit", type=int, required=True)
    j.add_argument("--tol", type=float, default=0.02)
    j.add_argument("--at-least", type=float, default=0)
    j.add_argument("--series", help="append the 1 s ratios to this GPU-tier series file")
    j.add_argument("--line", default="run", help="the series line's name")
    a = p.parse_args()
    if a.cmd == "run":
        run(a.mode, a.seconds, a.duty)
        return 0
    return judge(a.unlimited, a.limited, a.limit, a.tol, a.at_least, a.series, a.line)


if __name__ == "__main__":
    sys.exit(main())
