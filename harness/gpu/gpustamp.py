"""The GPU's own clock at points of a stream: a one-thread kernel that stores %globaltimer (ns,
the clock every context of the GPU shares) into a device buffer. Placed before and after each step
of a workload, it says when the GPU started and finished the step, in one timebase for every
process on the GPU: the slices of the node scheduler, and the idle time between them, as the GPU
ran them (sched_workload.py; docs/benchmarks.md, "Where the time goes").

Only libcuda.so.1 through ctypes: the kernel is PTX, loaded into the context current on the
calling thread (PyTorch's primary context), launched on the stream handle given.
"""
import ctypes
import time

STAMP_PTX = b""".version 7.0
.target sm_70
.address_size 64
.visible .entry limitbed_stamp(.param .u64 buf, .param .u32 idx)
{
  .reg .u64 p, t, off;
  .reg .u32 i;
  ld.param.u64 p, [buf];
  ld.param.u32 i, [idx];
  cvta.to.global.u64 p, p;
  mul.wide.u32 off, i, 8;
  add.u64 p, p, off;
  mov.u64 t, %globaltimer;
  st.global.u64 [p], t;
  ret;
}
"""


class CudaError(RuntimeError):
    pass


class Stamper:
    """Stamps into buf (a device pointer of n u64 slots) on stream (a CUstream handle, 0 for the
    legacy default stream)."""

    def __init__(self, buf_ptr, n, stream=0, lib="libcuda.so.1"):
        self.cu = ctypes.CDLL(lib)
        self.buf, self.n, self.stream = ctypes.c_uint64(buf_ptr), n, ctypes.c_void_p(stream)
        self.mod, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        self._ok(self.cu.cuModuleLoadData(ctypes.byref(self.mod), ctypes.c_char_p(STAMP_PTX)), "cuModuleLoadData")
        self._ok(self.cu.cuModuleGetFunction(ctypes.byref(self.fn), self.mod, b"limitbed_stamp"), "cuModuleGetFunction")
        self.idx = ctypes.c_uint32(0)
        self.params = (ctypes.c_void_p * 2)(ctypes.addressof(self.buf), ctypes.addressof(self.idx))
        self.used = 0

    def _ok(self, r, what):
        if r != 0:
            raise CudaError("%s failed: CUresult %d" % (what, r))

    def stamp(self):
        """Queues a stamp into the next slot; returns its index (None when the buffer is full)."""
        if self.used >= self.n:
            return None
        self.idx.value = self.used
        r = self.cu.cuLaunchKernel(self.fn, 1, 1, 1, 1, 1, 1, 0, self.stream, self.params, None)
        self._ok(r, "cuLaunchKernel")
        self.used += 1
        return self.used - 1

    def offset_ns(self, sync, read):
        """The GPU's timer minus the host's CLOCK_REALTIME (ns): a stamp between two host readings
        around a synchronisation; sync() waits for the stream, read(i) returns slot i."""
        t0 = time.time_ns()
        i = self.stamp()
        sync()
        t1 = time.time_ns()
        if i is None:
            return None, None
        return read(i) - (t0 + t1) // 2, (t1 - t0) // 2
