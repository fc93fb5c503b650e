package monitor

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/limitbed/limitbed/plugin/internal/safefile"
)

// DefaultScrapeTimeout bounds how long one scrape waits for the containers'
// usage regions. A region still being read then is reported for its pod
// (reason "timeout") and the scrape goes on with everything else.
const DefaultScrapeTimeout = 500 * time.Millisecond

// reasonTimeout marks a region whose read ran past the scrape's deadline,
// or that is still being read by an earlier scrape.
const reasonTimeout safefile.Reason = "timeout"

// errStalled is the error of a region read that ran past the deadline.
var errStalled = errors.New("read still running at the scrape deadline")

type regionResult struct {
	usage Usage
	err   error
}

// readRegions reads every container's usage.cache concurrently and returns
// by the deadline whatever happens: a read that has not finished by then
// is a per-pod timeout, and the path is not read again until that read
// returns, so a stuck file costs one goroutine, not one per scrape.
func (c *Collector) readRegions(entries []Entry) map[string]regionResult {
	timeout := c.ScrapeTimeout
	if timeout <= 0 {
		timeout = DefaultScrapeTimeout
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()

	type done struct {
		name string
		res  regionResult
	}
	ch := make(chan done, len(entries))
	out := make(map[string]regionResult, len(entries))
	started := 0
	for _, e := range entries {
		path := filepath.Join(c.Dir, e.Name, UsageCacheName)
		if !c.startRead(path) {
			out[e.Name] = regionResult{err: &safefile.Error{Path: path, Reason: reasonTimeout, Err: fmt.Errorf("an earlier scrape's read has not returned")}}
			continue
		}
		started++
		go func(name, path string) {
			defer c.endRead(path)
			u, err := c.Usage.ReadUsage(path)
			ch <- done{name, regionResult{u, err}}
		}(e.Name, path)
	}
	for started > 0 {
		select {
		case d := <-ch:
			out[d.name] = d.res
			started--
		case <-deadline.C:
			for _, e := range entries {
				if _, ok := out[e.Name]; !ok {
					path := filepath.Join(c.Dir, e.Name, UsageCacheName)
					out[e.Name] = regionResult{err: &safefile.Error{Path: path, Reason: reasonTimeout, Err: fmt.Errorf("%w (%s)", errStalled, timeout)}}
				}
			}
			return out
		}
	}
	return out
}

func (c *Collector) startRead(path string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight == nil {
		c.inflight = map[string]bool{}
	}
	if c.inflight[path] {
		return false
	}
	c.inflight[path] = true
	return true
}

func (c *Collector) endRead(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.inflight, path)
}

// reportOnce logs a rejected region when its reason changes, so a tenant
// that leaves a bad file in place cannot fill the log one line per scrape.
func (c *Collector) reportOnce(e Entry, err error) {
	reason := string(safefile.ReasonOf(err))
	c.mu.Lock()
	if c.reported == nil {
		c.reported = map[string]string{}
	}
	same := c.reported[e.Name] == reason
	c.reported[e.Name] = reason
	c.mu.Unlock()
	if !same {
		c.Logger.Info("Usage region rejected", "podUID", e.PodUID, "container", e.Container, "reason", reason, "err", err)
	}
}

func (c *Collector) clearReport(name string) {
	c.mu.Lock()
	delete(c.reported, name)
	c.mu.Unlock()
}

// scrapeState is what a Collector remembers between scrapes (zero value ready).
type scrapeState struct {
	mu       sync.Mutex
	inflight map[string]bool   // usage.cache paths being read
	reported map[string]string // container entry -> last logged reason
}
