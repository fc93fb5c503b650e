package monitor

import (
	"fmt"
	"strconv"
	"time"

	"github.com/limitbed/limitbed/plugin/identity"
	"github.com/limitbed/limitbed/plugin/internal/safefile"
	"github.com/limitbed/limitbed/plugin/limitsfile"
)

// procKey names one process on one GPU: a PID with its start time, so a
// reused PID is another process.
type procKey struct {
	pid   int
	start uint64
	gpu   string
}

// procHistory is what the driver showed of one process on one GPU.
type procHistory struct {
	used     uint64
	rose     time.Time // when its memory last grew (first seen counts as growing)
	inRegion bool      // its container's region listed it as a live process
}

func (a *Accounting) observe(k procKey, used uint64, now time.Time) {
	h := a.history[k]
	if h == nil {
		a.history[k] = &procHistory{used: used, rose: now}
		return
	}
	if used > h.used {
		h.rose = now
	}
	h.used = used
}

// offender is the process whose memory put g over: the one whose memory
// grew last, as the monitor saw it period by period (the honest processes
// that were there before keep their place); among equals, the one holding
// the most. Only g's own processes are candidates, so a container can never
// steer the choice to another pod's process.
func (a *Accounting) offender(g *ContainerUsage) *ProcessUsage {
	var best *ProcessUsage
	var bestRose time.Time
	for i := range g.Processes {
		p := &g.Processes[i]
		var rose time.Time
		if h := a.history[procKey{p.PID, p.StartTime, p.GPU}]; h != nil {
			rose = h.rose
		}
		if best == nil || rose.After(bestRose) || (rose.Equal(bestRose) && (p.UsedBytes > best.UsedBytes ||
			(p.UsedBytes == best.UsedBytes && p.PID > best.PID))) {
			best, bestRose = p, rose
		}
	}
	if best == nil {
		return nil
	}
	o := *best
	return &o
}

// regionInflight bounds the region reads of the accounting's explanations.
type regionInflight = safefile.Inflight

// regionView is a container's decoded region, or why it could not be read.
type regionView struct {
	u   Usage
	err error
}

func (a *Accounting) readRegions(keys []identity.Key) map[identity.Key]regionView {
	timeout := a.RegionTimeout
	if timeout <= 0 {
		timeout = DefaultScrapeTimeout
	}
	paths := make([]string, len(keys))
	for i, k := range keys {
		paths[i] = a.regionPath(k)
	}
	res := safefile.RunAll(&a.inflight, paths, timeout, RegionFiles{}.ReadUsage, nil)
	out := make(map[identity.Key]regionView, len(keys))
	for i, k := range keys {
		out[k] = regionView{res[paths[i]].Value, res[paths[i]].Err}
	}
	return out
}

// lists says whether the region holds p as a live process: "yes", "no", or
// "" when the region could not be read. A slot records the PID its process
// calls itself (NSPID), or, with the host-PID broker, the host's.
func (r regionView) lists(p ProcessUsage) string {
	if r.err != nil {
		return ""
	}
	for _, s := range r.u.Live() {
		if (p.NSPID != 0 && int(s.PID) == p.NSPID) || (s.HostPID != 0 && int(s.HostPID) == p.PID) {
			return "yes"
		}
	}
	return "no"
}

// cause names the likely reason the library let the container go over.
func (r regionView) cause(u *ContainerUsage) string {
	if r.err != nil {
		return fmt.Sprintf("its usage region cannot be read (%s): the processes run on private regions or the region was replaced, so the library caps each process, not the container", safefile.ReasonOf(r.err))
	}
	if o := u.Offender; o != nil && o.InRegion == "no" {
		return fmt.Sprintf("process %d is not in the container's usage region: it does not go through libvgpu.so (LD_PRELOAD of the driver, dlmopen, glibc's own dlsym, a static binary)", o.PID)
	}
	var dev *struct{ limit, used uint64 }
	for _, d := range r.u.Devices {
		if d.Index == u.Index {
			lim := d.LimitBytes
			if d.Unlimited {
				lim = limitsfile.Unlimited
			}
			dev = &struct{ limit, used uint64 }{lim, d.UsedBytes}
		}
	}
	switch {
	case u.Index < 0:
		return "the container holds memory on a GPU it was not given"
	case dev == nil || dev.limit != u.LimitBytes:
		region := "unlimited" // the decoder lists no device without a limit or usage
		if dev != nil {
			region = bytesText(dev.limit)
		}
		return fmt.Sprintf("the usage region's limit on device %d was rewritten (region: %s, limits file: %s)", u.Index, region, bytesText(u.LimitBytes))
	case dev.used <= u.LimitBytes:
		return fmt.Sprintf("the usage region counts %s on device %d where the driver sees %s: its counters were rewritten", bytesText(dev.used), u.Index, bytesText(u.UsedBytes))
	}
	return "the driver shows more than the container's library accounted"
}

// bytesText renders a byte count in MiB ("unlimited" for none).
func bytesText(b uint64) string {
	if b == limitsfile.Unlimited {
		return "unlimited"
	}
	return strconv.FormatUint(b>>20, 10) + " MiB"
}
