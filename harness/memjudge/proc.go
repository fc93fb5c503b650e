package memjudge

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one memload process of the pod and the judge's view of it.
type proc struct {
	idx    int    // the judge's name for it in a sequence ("p3")
	pid    int    // as fakegpu and the library see it (same PID namespace)
	how    string // exec, login, fork, spawn
	w      io.Writer
	lines  chan string
	cmd    *exec.Cmd // started by the judge (exec, login)
	conn   net.Conn  // connected back (fork, spawn)
	alive  bool
	units  map[int]int // CUDA ordinal -> accounting unit (known once used)
	cur    int         // current ordinal, -1 before init
	curCtx int         // current context: -1 the primary context of cur, else a ctx object's id
	full   bool        // its descriptor table is full (exhaust): the driver itself may refuse then
	// pins: forked (without exec) while this parent's descriptor table was full, so the child
	// could not map the region through a description of its own and shares the parent's, and
	// with it the parent's slot lock, until it next touches the region: a dead parent's charges
	// may stay counted while the child lives (docs/usage-cache.md, "Liveness": an over-count).
	pins    *proc
	objs    map[int]*object
	nextObj int
	log     *os.File
}

// object is an allocation (or context) the judge made a process create.
type object struct {
	kind    string
	unit    int
	bytes   uint64 // what the library is expected to charge for it
	truth   uint64 // what the driver holds for it (rounding)
	ctx     int    // the context it lives in: -1 the primary context of ordinal, else a ctx object's id
	ordinal int    // the CUDA ordinal it was made on
	exp     *export
}

type export struct{ pid, fd int }

const replyTimeout = 90 * time.Second

func (p *proc) name() string { return "p" + strconv.Itoa(p.idx) }

func startReader(r io.Reader) chan string {
	ch := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			ch <- sc.Text()
		}
		close(ch)
	}()
	return ch
}

// hello reads the first line a memload prints and returns its pid.
func hello(ctx context.Context, lines chan string) (int, error) {
	l, err := next(ctx, lines)
	if err != nil {
		return 0, err
	}
	var pid int
	if _, err := fmt.Sscanf(l, "hello %d", &pid); err != nil {
		return 0, fmt.Errorf("memload greeted %q, want \"hello PID\"", l)
	}
	return pid, nil
}

func next(ctx context.Context, lines chan string) (string, error) {
	t := time.NewTimer(replyTimeout)
	defer t.Stop()
	select {
	case l, ok := <-lines:
		if !ok {
			return "", errGone
		}
		return l, nil
	case <-t.C:
		return "", fmt.Errorf("no reply within %v", replyTimeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

var errGone = errors.New("the process is gone")

// do sends one command and returns the reply's fields: ok (and values) or err CODE.
func (p *proc) do(ctx context.Context, cmd string) (reply, error) {
	if !p.alive {
		return reply{}, errGone
	}
	if _, err := io.WriteString(p.w, cmd+"\n"); err != nil {
		p.alive = false
		return reply{}, errGone
	}
	l, err := next(ctx, p.lines)
	if err != nil {
		if errors.Is(err, errGone) {
			p.alive = false
		}
		return reply{}, err
	}
	return parseReply(l)
}

type reply struct {
	ok     bool
	code   int // CUDA error (or -1 for a system error) when !ok
	fields []string
	text   string
}

func parseReply(l string) (reply, error) {
	f := strings.Fields(l)
	switch {
	case len(f) >= 1 && f[0] == "ok":
		return reply{ok: true, fields: f[1:], text: l}, nil
	case len(f) >= 2 && f[0] == "err":
		code, err := strconv.Atoi(f[1])
		if err != nil {
			return reply{}, fmt.Errorf("memload reply %q: bad error code", l)
		}
		return reply{code: code, fields: f[2:], text: l}, nil
	}
	return reply{}, fmt.Errorf("memload reply %q: want \"ok ...\" or \"err CODE ...\"", l)
}

// kill ends the process at once (SIGKILL), as an OOM killer or a crash would.
func (p *proc) kill() {
	if p.pid > 0 {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
	p.stop()
}

// stop releases the judge's side of the process (waits for one it started).
func (p *proc) stop() {
	p.alive = false
	if p.conn != nil {
		_ = p.conn.Close()
	}
	if p.cmd != nil {
		if c, ok := p.w.(io.Closer); ok {
			_ = c.Close()
		}
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	}
	if p.log != nil {
		_ = p.log.Close()
	}
}
