package monitor

import (
	"path/filepath"
	"sync"
	"time"

	"github.com/limitbed/limitbed/plugin/internal/safefile"
	"github.com/limitbed/limitbed/plugin/paths"
)

// DefaultScrapeTimeout bounds how long one scrape waits for the containers'
// usage regions. A region still being read then is reported for its pod
// (reason "timeout") and the scrape goes on with everything else.
const DefaultScrapeTimeout = 500 * time.Millisecond

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
	files := make([]string, len(entries))
	for i, e := range entries {
		files[i] = filepath.Join(c.Dir, e.Name, paths.UsageCacheName)
	}
	res := safefile.RunAll(&c.inflight, files, timeout, c.Usage.ReadUsage, nil)
	out := make(map[string]regionResult, len(entries))
	for i, e := range entries {
		out[e.Name] = regionResult{res[files[i]].Value, res[files[i]].Err}
	}
	return out
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
	inflight safefile.Inflight // usage.cache paths being read
	reported map[string]string // container entry -> last logged reason
}
