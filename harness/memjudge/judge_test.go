package memjudge_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitbed/limitbed/harness/memjudge"
	"github.com/limitbed/limitbed/internal/cbuild"
	"github.com/limitbed/limitbed/internal/tier"
)

// config: the pod of every judge test. Login sessions need root (a private mount namespace);
// without it the judge runs exec'd processes only, and says so.
func config(t *testing.T) memjudge.Config {
	t.Helper()
	p := cbuild.Build(t)
	login := os.Geteuid() == 0
	if !login {
		tier.Require(t, tier.Root.For("the judge's login sessions (unshare -m)"))
	}
	return memjudge.Config{
		Paths:  memjudge.Paths{Root: p.Root, Lib: p.Lib, Bin: p.Bin},
		Limits: []uint64{3000 << 20, 2000 << 20},
		Login:  login,
		Procs:  5,
		Steps:  150,
		Dir:    t.TempDir(),
		Logf:   t.Logf,
	}
}

// report fails the test with the seed and the shrunk sequence, written where Replay finds it.
func report(t *testing.T, cfg memjudge.Config, f *memjudge.Failure) {
	t.Helper()
	s := memjudge.Shrink(context.Background(), cfg, f, 60*time.Second)
	file := filepath.Join(cbuild.RepoRoot(), "build", fmt.Sprintf("memjudge-seed-%d.txt", f.Seed))
	_ = os.MkdirAll(filepath.Dir(file), 0o755)
	_ = os.WriteFile(file, []byte(strings.Join(s.Lines, "\n")+"\n"), 0o644)
	t.Fatalf("%v\nshrunk from %d to %d steps (%s), replay: MEMJUDGE_REPLAY=%s MEMJUDGE_SEED=%d go test ./harness/memjudge/ -run TestMemJudgeReplay\n%s\n%s",
		f, len(f.Lines), len(s.Lines), s.Detail, file, f.Seed, "sequence:", strings.Join(s.Lines, "\n"))
}

// TestMemJudge runs seeded sequences for a bounded time (make test: MEMJUDGE_DURATION, default
// 60 s; the soak: MEMJUDGE_DURATION=30m MEMJUDGE_SEED=N).
func TestMemJudge(t *testing.T) {
	cfg := config(t)
	dur := 60 * time.Second
	if v := os.Getenv("MEMJUDGE_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("MEMJUDGE_DURATION=%q: %v (want a Go duration such as 30m)", v, err)
		}
		dur = d
	}
	seed := int64(1)
	if v := os.Getenv("MEMJUDGE_SEED"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("MEMJUDGE_SEED=%q: %v", v, err)
		}
		seed = s
	}
	cfg.Logf = nil
	end := time.Now().Add(dur)
	var total memjudge.Stats
	runs := 0
	for ; runs == 0 || time.Now().Before(end); seed++ {
		f, st, err := memjudge.Generate(context.Background(), cfg, seed)
		total.Steps += st.Steps
		total.Procs += st.Procs
		total.Allocs += st.Allocs
		total.Granted += st.Granted
		total.Refused += st.Refused
		total.Checks += st.Checks
		runs++
		if err != nil {
			var re *memjudge.RunError
			if errors.As(err, &re) {
				file := filepath.Join(cbuild.RepoRoot(), "build", fmt.Sprintf("memjudge-seed-%d-error.txt", seed))
				_ = os.WriteFile(file, []byte(strings.Join(re.Lines, "\n")+"\n"), 0o644)
				logs, _ := filepath.Glob(filepath.Join(re.Dir, "*.log"))
				for _, l := range logs {
					if b, _ := os.ReadFile(l); len(b) > 0 {
						t.Logf("%s:\n%s", l, truncateTail(string(b), 2000))
					}
				}
				t.Fatalf("%v\nsequence written to %s", err, file)
			}
			t.Fatalf("seed %d: %v", seed, err)
		}
		if f != nil {
			report(t, cfg, f)
		}
	}
	t.Logf("memjudge: %d sequences (seeds %d..%d), %d steps, %d processes, %d allocations (%d granted, %d refused), %d checks, no failure",
		runs, seed-int64(runs), seed-1, total.Steps, total.Procs, total.Allocs, total.Granted, total.Refused, total.Checks)
}

func truncateTail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// TestMemJudgeReplay runs a recorded sequence (MEMJUDGE_REPLAY=file) and fails as it failed.
func TestMemJudgeReplay(t *testing.T) {
	file := os.Getenv("MEMJUDGE_REPLAY")
	if file == "" {
		t.Skip("set MEMJUDGE_REPLAY to a sequence file a failing run wrote")
	}
	cfg := config(t)
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var lines []string
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	seed, _ := strconv.ParseInt(os.Getenv("MEMJUDGE_SEED"), 10, 64)
	cfg.Trace = os.Getenv("MEMJUDGE_TRACE") != ""
	f, st, err := memjudge.Replay(context.Background(), cfg, seed, lines)
	if err != nil {
		t.Fatal(err)
	}
	if f != nil {
		logs, _ := filepath.Glob(filepath.Join(f.Dir, "*.log"))
		for _, l := range logs {
			if b, _ := os.ReadFile(l); len(b) > 0 {
				t.Logf("%s:\n%s", l, truncateTail(string(b), 6000))
			}
		}
		if out, err := exec.Command(filepath.Join(cfg.Paths.Bin, "regiondump"), filepath.Join(f.Dir, "usage.cache")).Output(); err == nil {
			t.Logf("the library's view (regiondump):\n%s", out)
		}
		t.Fatalf("%v\n%s", f, strings.Join(f.Lines, "\n"))
	}
	t.Logf("replayed %d steps: no failure (%+v)", len(lines), st)
}
