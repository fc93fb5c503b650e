"""The workloads of the node scheduler's GPU cases (harness/gpu/sched_cases.sh): PyTorch steps of
one kind, counted per 1 s window, each window ending with a synchronisation so its work has run.

  sched_workload.py --mode M --seconds S [--stamps N] [--out FILE]

Modes (a step is the unit counted):
  gemm    8 bf16 4096x4096 GEMMs, launched back to back (a throughput workload)
  graph   the same 8 GEMMs captured once and replayed as a CUDA graph
  sync    2 bf16 4096x4096 GEMMs, then torch.cuda.synchronize(): latency-bound inference
  membw   4 copies of 512 MiB: a memory-bound kernel
  train   one training step of a 4-layer MLP (4096 wide, batch 512, bf16): forward, backward, SGD

With --stamps N the GPU's timer is stamped before and after each step (gpustamp.py) into N slots:
the JSON then holds each step's [start, end] on the GPU's clock and that clock's offset from the
host's CLOCK_REALTIME, so the steps of every process on the GPU line up with each other and with
the scheduler's trace. One JSON object on stdout (or --out).
"""
import argparse
import json
import os
import sys
import time


def build(mode, torch):
    dev = "cuda"
    if mode in ("gemm", "graph", "sync"):
        n, per = 4096, (2 if mode == "sync" else 8)
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        out = torch.empty(n, n, device=dev, dtype=torch.bfloat16)

        def step():
            for _ in range(per):
                torch.matmul(a, b, out=out)

        return step
    if mode == "membw":
        src = torch.empty(512 << 20, device=dev, dtype=torch.uint8)
        dst = torch.empty_like(src)

        def step():
            for _ in range(4):
                dst.copy_(src)

        return step
    if mode == "train":
        w = 4096
        net = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(w, w), torch.nn.ReLU())]).to(dev, torch.bfloat16)
        opt = torch.optim.SGD(net.parameters(), lr=1e-4)
        x = torch.randn(512, w, device=dev, dtype=torch.bfloat16)

        def step():
            opt.zero_grad(set_to_none=True)
            net(x).float().square().mean().backward()
            opt.step()

        return step
    raise SystemExit("sched_workload: unknown mode %r (gemm graph sync membw train)" % mode)


def as_graph(step, torch):
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # warm-up on the capture stream, as PyTorch's documentation asks
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        step()
    return g.replay


def run(mode, seconds, nstamps):
    import torch

    step = build(mode, torch)
    step()
    torch.cuda.synchronize()
    if mode == "graph":
        step = as_graph(step, torch)
        step()
        torch.cuda.synchronize()
    stamper, buf = None, None
    if nstamps:
        from gpustamp import Stamper

        buf = torch.zeros(2 * nstamps + 1, dtype=torch.int64, device="cuda")
        stamper = Stamper(buf.data_ptr(), 2 * nstamps + 1, torch.cuda.current_stream().cuda_stream)
    sync_each = mode == "sync"
    windows, ends = [], []
    t0 = time.monotonic()
    start_ns = time.time_ns()
    wstart, done = t0, 0
    while time.monotonic() - t0 < seconds:
        if stamper and stamper.used + 2 < stamper.n:
            stamper.stamp()
            step()
            stamper.stamp()
        else:
            step()
        if sync_each:
            torch.cuda.synchronize()
        done += 1
        if time.monotonic() - wstart >= 1.0:
            torch.cuda.synchronize()
            t = time.monotonic()
            windows.append(done / (t - wstart))
            ends.append(time.time_ns())
            wstart, done = t, 0
    torch.cuda.synchronize()
    res = {"mode": mode, "pid": os.getpid(), "start_ns": start_ns, "windows": windows, "window_end_ns": ends}
    if stamper:
        used = stamper.used
        off, err = stamper.offset_ns(torch.cuda.synchronize, lambda i: int(buf[i].item()))
        vals = buf[:used].cpu().tolist()
        res["stamps"] = [[vals[i], vals[i + 1]] for i in range(0, used - 1, 2)]
        res["gt_offset_ns"], res["gt_offset_err_ns"] = off, err
    return res


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", required=True, choices=["gemm", "graph", "sync", "membw", "train"])
    p.add_argument("--seconds", type=float, default=15)
    p.add_argument("--stamps", type=int, default=0)
    p.add_argument("--out")
    a = p.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    res = run(a.mode, a.seconds, a.stamps)
    text = json.dumps(res, separators=(",", ":"))
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
