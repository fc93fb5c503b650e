package gpuwork

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
)

// Once runs the tool (fakegpu's gpuwork) once with env (the GPU's FAKEGPU_PROFILE,
// FAKEGPU_PROFILE_DIR and FAKEGPU_STATE_DIR) and returns its snapshot.
func Once(ctx context.Context, tool string, env []string) (Snapshot, error) {
	cmd := exec.CommandContext(ctx, tool)
	cmd.Env = env
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return Snapshot{}, fmt.Errorf("%s: %w: %s", tool, err, strings.TrimSpace(stderr.String()))
	}
	return Parse(bytes.TrimSpace(out.Bytes()))
}

// Reader keeps one `gpuwork --serve` running and takes a snapshot on demand: a sampler reads
// every 100 ms without starting a process each time. Safe for concurrent use.
type Reader struct {
	mu     sync.Mutex
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr syncBuffer
	tool   string
}

// syncBuffer is the tool's stderr, written by exec's copying goroutine and read in errors.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Open starts the tool in serve mode.
func Open(ctx context.Context, tool string, env []string) (*Reader, error) {
	cmd := exec.CommandContext(ctx, tool, "--serve")
	cmd.Env = env
	return OpenCommand(cmd)
}

// OpenCommand starts cmd, a command that runs the tool in serve mode elsewhere (`docker exec -i
// NODE gpuwork --serve`: a kind node's GPU), and reads its snapshots as Open's.
func OpenCommand(cmd *exec.Cmd) (*Reader, error) {
	tool := strings.Join(cmd.Args, " ")
	r := &Reader{tool: tool, cmd: cmd}
	r.cmd.Stderr = &r.stderr
	in, err := r.cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", tool, err)
	}
	r.in, r.out = in, bufio.NewReaderSize(out, 1<<20)
	return r, nil
}

// Snapshot asks for one reading and parses it.
func (r *Reader) Snapshot() (Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := io.WriteString(r.in, "\n"); err != nil {
		return Snapshot{}, fmt.Errorf("%s: %w (%s)", r.tool, err, strings.TrimSpace(r.stderr.String()))
	}
	line, err := r.out.ReadBytes('\n')
	if err != nil {
		return Snapshot{}, fmt.Errorf("%s: %w (%s)", r.tool, err, strings.TrimSpace(r.stderr.String()))
	}
	return Parse(bytes.TrimSpace(line))
}

// Close ends the tool (end of its input) and waits for it.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.in.Close()
	if err := r.cmd.Wait(); err != nil {
		return fmt.Errorf("%s: %w (%s)", r.tool, err, strings.TrimSpace(r.stderr.String()))
	}
	return nil
}
