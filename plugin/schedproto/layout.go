// Package schedproto is the node side of the compute scheduler's protocol with libvgpu.so: the
// binary layout of the grant file (node -> container, read-only in the container) and of the
// report file (container -> node, written by the container's processes), both defined in
// hamicore/include/limitbed/sched.h and held to it by TestLayoutMatchesSchedH. Every reader and
// writer of either file goes through this package; docs/hamicore.md ("Compute limit") describes
// the protocol.
//
// The report file is the container's: Decode and ReportFile treat it as hostile input (exact
// size, no symlink, a fault on a truncated mapping costs one read, never the process), and
// nothing in it names a container, a GPU, a limit or a priority.
package schedproto

// Layout constants, as sched.h defines them.
const (
	GrantMagic  = 0x004445484353424C // "LBSCHED\0"
	ReportMagic = 0x54524F504552424C // "LBREPORT"
	Version     = 1
	MaxGPUs     = 16
	FileSize    = 4096

	// ContainerGrantPath and ContainerReportPath are compiled into libvgpu.so.
	ContainerGrantPath  = "/usr/local/vgpu/sched.grant"
	ContainerReportPath = "/usr/local/vgpu/sched.report"
	// ReportName is the report's name in the container's cache directory.
	ReportName = "sched.report"

	entrySize = 64
	entries   = 64 // offset of entry 0 in both files

	offMagic    = 0
	offVersion  = 8
	offNGPUs    = 12 // grant only
	offFeatures = 12 // report only
	offPeriod   = 16 // grant only

	offUUID    = 0  // grant entry
	offWord    = 16 // grant entry
	offGrantID = 20 // grant entry
	offBudget  = 24 // grant entry
	offBeat    = 28 // grant entry
	offAllowed = 32 // grant entry: allowed_us (8 bytes)
	offStamp   = 40 // grant entry: allowed_beat

	offJoin   = 0  // report entry
	offWant   = 8  // report entry
	offActive = 12 // report entry
	offBell   = 16 // report entry

	structSize = entries + MaxGPUs*entrySize // 1088
)

// FeatureLive, in a report's features: its library keeps the live locks (LiveByte).
const FeatureLive = 1

// LiveByte is the byte of the report file (past its end) on which each process of the container
// holds a shared lock while it has joined a slice on GPU i and not reported that slice's drain;
// the kernel drops it when the process dies (sched.h, LB_REPORT_F_LIVE).
func LiveByte(i int) uint64 { return FileSize + uint64(i) }

// State is a grant's state for one GPU of one container.
type State uint32

// The states of a grant word (its low bits).
const (
	Off  State = 0 // the scheduler does not drive this GPU: the library paces alone
	Wait State = 1 // another container's turn
	Run  State = 2 // this container's slice
	Free State = 3 // not held: launch freely
)

const (
	stateMask = 3
	seqShift  = 2
	seqMask   = 1<<30 - 1
)

func (s State) String() string {
	switch s {
	case Off:
		return "off"
	case Wait:
		return "wait"
	case Run:
		return "run"
	case Free:
		return "free"
	}
	return "invalid"
}

// Word packs a grant word.
func Word(seq uint32, s State) uint32 { return seq<<seqShift | uint32(s)&stateMask }

// SplitWord unpacks a grant word into its sequence (30 bits) and state.
func SplitWord(w uint32) (seq uint32, s State) { return w >> seqShift, State(w & stateMask) }

// SeqSince is how many sequence steps b is ahead of a, modulo the 30-bit sequence.
func SeqSince(a, b uint32) uint32 { return (b - a) & seqMask }

// Join is a report's join word.
type Join struct {
	Grant  uint32 // the slice the counts are of
	Joins  uint16 // processes that started launching under it
	Drains uint16 // of those, the ones whose work of the slice has finished
}

// DecodeJoin splits a join word.
func DecodeJoin(v uint64) Join {
	return Join{Grant: uint32(v >> 32), Joins: uint16(v >> 16), Drains: uint16(v)}
}

// Encode packs a join word (the library's side; tests write reports with it).
func (j Join) Encode() uint64 { return uint64(j.Grant)<<32 | uint64(j.Joins)<<16 | uint64(j.Drains) }

// Drained reports whether nothing of the container runs under slice g: no process joined it, or
// every process that did has drained.
func (j Join) Drained(g uint32) bool { return j.Grant != g || j.Joins == j.Drains }
