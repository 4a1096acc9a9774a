package scheduler

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/klauspost/compress/zstd"
)

// The packed form of a Snapshot (version 3) is what an allocator carries through
// continue-as-new. Job ids dominate a long queue: 50,000 lm-mpi-job-<uuid> ids are 2.4 MB as
// JSON, and a general-purpose compressor leaves about 20 bytes of each. Packing stores each id
// as its prefix (interned) and the 122 random bits of its UUID, times as differences between
// neighbours, and the rest as JSON; zstd then squeezes the columns. Every step is deterministic:
// the same Snapshot always packs to the same bytes.
//
// Submission times, which only tell people how long a job has waited, are kept to the second;
// start times, which the policy reads (min_runtime_before_preemption, work lost), to the
// millisecond. Everything else is kept exactly.

// maxUnpackedBytes bounds what UnpackSnapshot inflates, against a corrupt or hostile input.
const maxUnpackedBytes = 256 << 20

// The codecs are shared: EncodeAll and DecodeAll may be called at once from many goroutines (one
// per allocator continuing as new), each taking one of GOMAXPROCS encoder states, so they rarely
// wait for each other; making a codec per call would cost tens of MB and milliseconds in the
// very workflow task that hands over.
var (
	packEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	packDecoder, _ = zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxUnpackedBytes))
)

// packedSnapshot is the JSON inside the zstd frame: the Snapshot without its bulky columns
// (waiting and running job ids, waiting sequences, waiting and running times), which follow it.
type packedSnapshot struct {
	Snapshot Snapshot  `json:"s"`
	IDs      packedIDs `json:"ids"`
	// WaitingSeq is each waiting request's Seq minus the previous one's (launch order keeps them close).
	WaitingSeq []int64 `json:"wseq"`
	// Times since the epoch, each minus the previous one in its column (0 = zero time):
	// submissions in seconds, starts in milliseconds.
	WaitingSubmitted []int64 `json:"wt"`
	RunningSubmitted []int64 `json:"rt"`
	RunningStarted   []int64 `json:"rst"`
}

// packedIDs are the job ids of the waiting requests, then of the running jobs. An id made of a
// prefix and a canonical (lower-case, hyphenated) version-4 UUID, as trainq names jobs, is stored
// as the prefix's index and the UUID's random bits; any other id is stored as it is.
type packedIDs struct {
	Prefixes []string `json:"prefixes,omitempty"`
	Prefix   []int32  `json:"p"` // per id: index into Prefixes, or -1 for the next Raw id
	// UUIDs holds 14 bytes per id with a prefix: the UUID without bytes 6 and 8, which hold its
	// version and variant bits; UUIDRest holds the other 10 bits of those two bytes, packed
	// (see tenBits).
	UUIDs    []byte   `json:"u,omitempty"`
	UUIDRest []byte   `json:"ur,omitempty"`
	Raw      []string `json:"r,omitempty"`
}

// PackSnapshot encodes s in the compact version-3 form (see UnpackSnapshot). Times are kept to
// the millisecond.
func PackSnapshot(s Snapshot) ([]byte, error) {
	ps := packedSnapshot{Snapshot: s}
	ps.Snapshot.Version = 3
	w := &ps.Snapshot.Waiting
	ids := make([]string, 0, len(w.Job)+len(s.Running))
	ids = append(ids, w.Job...)
	ps.WaitingSeq = deltas(w.Seq, func(v int64) int64 { return v })
	ps.WaitingSubmitted = deltas(w.SubmittedAt, toSeconds)
	w.Job, w.Seq, w.SubmittedAt = nil, nil, nil
	ps.Snapshot.Running = make([]SnapshotRunning, len(s.Running))
	submitted := make([]int64, len(s.Running))
	started := make([]int64, len(s.Running))
	for i, sr := range s.Running {
		ids = append(ids, sr.Job)
		submitted[i], started[i] = sr.SubmittedAt, sr.StartedAt
		sr.Job, sr.SubmittedAt, sr.StartedAt = "", 0, 0
		ps.Snapshot.Running[i] = sr
	}
	ps.RunningSubmitted = deltas(submitted, toSeconds)
	ps.RunningStarted = deltas(started, toMillis)
	ps.IDs = packIDs(ids)
	b, err := json.Marshal(ps)
	if err != nil {
		return nil, fmt.Errorf("pack snapshot: %w", err)
	}
	return packEncoder.EncodeAll(b, nil), nil
}

// UnpackSnapshot decodes what PackSnapshot wrote. It checks the columns fit together; Restore
// checks the state.
func UnpackSnapshot(b []byte) (Snapshot, error) {
	raw, err := packDecoder.DecodeAll(b, nil)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: not a packed snapshot: %w", err)
	}
	var ps packedSnapshot
	if err := json.Unmarshal(raw, &ps); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: packed snapshot: %w", err)
	}
	s := ps.Snapshot
	if s.Version != 3 {
		return Snapshot{}, fmt.Errorf("snapshot: a packed snapshot has version 3, this one %d", s.Version)
	}
	nWaiting := len(s.Waiting.Attempt)
	ids, err := ps.IDs.unpack()
	if err != nil {
		return Snapshot{}, err
	}
	if len(ids) != nWaiting+len(s.Running) || len(ps.WaitingSeq) != nWaiting || len(ps.WaitingSubmitted) != nWaiting ||
		len(ps.RunningSubmitted) != len(s.Running) || len(ps.RunningStarted) != len(s.Running) {
		return Snapshot{}, fmt.Errorf("snapshot: packed columns have different lengths")
	}
	s.Waiting.Job = ids[:nWaiting]
	s.Waiting.Seq = sums(ps.WaitingSeq, func(v int64) int64 { return v })
	s.Waiting.SubmittedAt = sums(ps.WaitingSubmitted, fromSeconds)
	submitted, started := sums(ps.RunningSubmitted, fromSeconds), sums(ps.RunningStarted, fromMillis)
	for i := range s.Running {
		s.Running[i].Job, s.Running[i].SubmittedAt, s.Running[i].StartedAt = ids[nWaiting+i], submitted[i], started[i]
	}
	return s, nil
}

func packIDs(ids []string) packedIDs {
	var out packedIDs
	var rest tenBits
	out.Prefix = make([]int32, len(ids))
	prefixIdx := map[string]int32{}
	for i, id := range ids {
		prefix, u, ok := splitUUID(id)
		if !ok {
			out.Prefix[i] = -1
			out.Raw = append(out.Raw, id)
			continue
		}
		k, seen := prefixIdx[prefix]
		if !seen { // numbered in order of first use, so the output does not depend on map order
			k = int32(len(out.Prefixes))
			out.Prefixes = append(out.Prefixes, prefix)
			prefixIdx[prefix] = k
		}
		out.Prefix[i] = k
		out.UUIDs = append(append(append(out.UUIDs, u[:6]...), u[7]), u[9:]...)
		rest.append(uint16(u[6]&0x0f)<<6 | uint16(u[8]&0x3f))
	}
	out.UUIDRest = rest.b
	return out
}

func (p packedIDs) unpack() ([]string, error) {
	ids := make([]string, len(p.Prefix))
	rests, err := tenBits{b: p.UUIDRest}.values(len(p.UUIDs) / 14)
	if err != nil {
		return nil, err
	}
	nextUUID, nextRest, nextRaw := p.UUIDs, rests, p.Raw
	for i, k := range p.Prefix {
		switch {
		case k == -1 && len(nextRaw) > 0:
			ids[i], nextRaw = nextRaw[0], nextRaw[1:]
		case k >= 0 && int(k) < len(p.Prefixes) && len(nextUUID) >= 14 && len(nextRest) > 0:
			var u uuid.UUID
			b, rest := nextUUID[:14], nextRest[0]
			copy(u[:6], b[:6])
			u[6], u[7], u[8] = 0x40|byte(rest>>6), b[6], 0x80|byte(rest&0x3f)
			copy(u[9:], b[7:])
			ids[i] = p.Prefixes[k] + u.String()
			nextUUID, nextRest = nextUUID[14:], nextRest[1:]
		default:
			return nil, fmt.Errorf("snapshot: packed job id %d is malformed", i)
		}
	}
	if len(nextUUID) != 0 || len(nextRest) != 0 || len(nextRaw) != 0 {
		return nil, fmt.Errorf("snapshot: packed job ids have %d UUID bytes, %d UUID rests and %d ids left over", len(nextUUID), len(nextRest), len(nextRaw))
	}
	return ids, nil
}

// splitUUID splits an id ending in a canonical version-4 UUID into its prefix and the UUID.
func splitUUID(id string) (string, uuid.UUID, bool) {
	const uuidLen = 36
	if len(id) < uuidLen {
		return "", uuid.UUID{}, false
	}
	prefix, tail := id[:len(id)-uuidLen], id[len(id)-uuidLen:]
	u, err := uuid.Parse(tail)
	if err != nil || u.String() != tail || u.Version() != 4 || u.Variant() != uuid.RFC4122 { // only what prints back the same
		return "", uuid.UUID{}, false
	}
	return prefix, u, true
}

// tenBits packs 10-bit values, four to five bytes.
type tenBits struct {
	b []byte
	n int // values appended
}

func (t *tenBits) append(v uint16) {
	bit := t.n * 10
	if len(t.b) < (bit+10+7)/8 {
		t.b = append(t.b, 0, 0)[:(bit+10+7)/8]
	}
	for k := 0; k < 10; k++ {
		if v&(1<<k) != 0 {
			t.b[(bit+k)/8] |= 1 << ((bit + k) % 8)
		}
	}
	t.n++
}

// values unpacks n values; the bytes must hold exactly that many.
func (t tenBits) values(n int) ([]uint16, error) {
	if len(t.b) != (n*10+7)/8 {
		return nil, fmt.Errorf("snapshot: %d bytes of UUID bits for %d UUIDs", len(t.b), n)
	}
	out := make([]uint16, n)
	for i := range out {
		for k := 0; k < 10; k++ {
			bit := i*10 + k
			if t.b[bit/8]&(1<<(bit%8)) != 0 {
				out[i] |= 1 << k
			}
		}
	}
	return out, nil
}

func toMillis(ns int64) int64  { return truncate(ns, 1e6) }
func toSeconds(ns int64) int64 { return truncate(ns, 1e9) }

// truncate divides a time in nanoseconds by unit; a time in 1970's first unit stays non-zero.
func truncate(ns, unit int64) int64 {
	if ns == 0 {
		return 0
	}
	return max(ns/unit, 1)
}

func fromMillis(ms int64) int64 { return ms * 1e6 }
func fromSeconds(s int64) int64 { return s * 1e9 }

// deltas maps each value and returns each result minus the previous one.
func deltas(vs []int64, f func(int64) int64) []int64 {
	out := make([]int64, len(vs))
	prev := int64(0)
	for i, v := range vs {
		m := f(v)
		out[i], prev = m-prev, m
	}
	return out
}

// sums undoes deltas, mapping each running sum back with f.
func sums(ds []int64, f func(int64) int64) []int64 {
	out := make([]int64, len(ds))
	sum := int64(0)
	for i, d := range ds {
		sum += d
		out[i] = f(sum)
	}
	return out
}
