/*
 * gpuprobe: the GPU tier's native probes, one JSON line each, built against the driver with only
 * the project's headers (abi/include) and linked by soname, so that the same binary runs on the
 * card and — with fakegpu's libraries first on LD_LIBRARY_PATH and FAKEGPU_PROFILE set — on
 * fakegpu: the fidelity section compares the two (docs/gpu-report.md, "Fidelity").
 *
 *   gpuprobe card                      the first GPU: name, UUID, memory, driver and CUDA versions,
 *                                      SMs, compute capability, clocks, power limit
 *   gpuprobe memory                    what a context costs and what small allocations cost by the
 *                                      driver's per-process record (NVML), cuMemGetInfo's total,
 *                                      the VMM granularity
 *   gpuprobe launch [--n N]            medians of N empty-kernel launches: the call alone, and a
 *                                      launch with its cuCtxSynchronize
 *   gpuprobe load --seconds S [--duty D] [--kernel-us U]
 *                                      spin kernels on every SM, D of the time (1: back to back)
 *   gpuprobe clocks --seconds S [--every-ms M] [--skip S0]
 *                                      the SM clock and the GPU's utilisation, sampled every M ms
 *                                      after S0 s: median clock, mean utilisation
 *   gpuprobe samples --seconds S [--every-ms M]
 *                                      NVML's per-process utilisation samples: per process how
 *                                      many (its sample period), and in how many 1 s windows more
 *                                      than one process had a sample (the attribution)
 *
 * Exit 0 with the JSON line; 1 when the driver could not answer (the line's "error" says what
 * failed); 2 on a usage error.
 */
#ifndef GPUPROBE_H
#define GPUPROBE_H

#include <stdio.h>

#include "limitbed/cuda_abi.h"
#include "limitbed/nvml_abi.h"

/* The options of every subcommand (each takes those it needs). */
typedef struct {
    double seconds, duty, skip;
    unsigned every_ms, kernel_us, n;
} gp_opts;

double gp_now(void);
void gp_sleep(double s);
const char *gp_cu_err(CUresult r);
/* gp_fail prints {"error":...} naming the call, and returns 1 (the exit status). */
int gp_fail(const char *what, const char *err);
/* gp_context: cuInit, the first device's primary context made current; 0 or an exit status. */
int gp_context(CUdevice *dev);
/* gp_spin_function: the PTX spin kernel (fakegpu_spin: its u64 parameter's ns on the global timer). */
int gp_spin_function(CUfunction *f, const char *name);

int gp_load(const gp_opts *o);
int gp_clocks(const gp_opts *o);
int gp_samples(const gp_opts *o);

#endif
