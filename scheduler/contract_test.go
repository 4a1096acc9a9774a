package scheduler

import "time"

// Compile-time check of the exported API other packages are written against.
var (
	_ func(Class) string                      = Class.String
	_ func(string) (Class, error)             = ParseClass
	_ func(string) (Demand, error)            = ParseInstanceType
	_ func([]Node, Policy) (*Pool, error)     = NewPool
	_ func(*Pool, Request) error              = (*Pool).Admit
	_ func(*Pool, Request) error              = (*Pool).Enqueue
	_ func(*Pool, time.Time) Decisions        = (*Pool).Schedule
	_ func(*Pool, string, int, int) bool      = (*Pool).Release
	_ func(*Pool, string) bool                = (*Pool).BeginRelease
	_ func(*Pool, string) bool                = (*Pool).Cancel
	_ func(*Pool, string, int) bool           = (*Pool).CancelAttempt
	_ func(*Pool, string) bool                = (*Pool).MarkNodeLost
	_ func(*Pool, string) bool                = (*Pool).MarkNodeUp
	_ func(*Pool) []string                    = (*Pool).LostNodes
	_ func(*Pool, Adoption) error             = (*Pool).Adopt
	_ func(*Pool) View                        = (*Pool).View
	_ func(*Pool, string) (WaitingInfo, bool) = (*Pool).Explain
	_ func(*Pool, string) (RunningInfo, bool) = (*Pool).Running
	_ func(*Pool) int                         = (*Pool).WaitingCount
	_ func(*Pool) []string                    = (*Pool).RunningJobs
	_ func(*Pool) Snapshot                    = (*Pool).Snapshot
	_ func(Snapshot) (*Pool, error)           = Restore
	_                                         = []Class{Low, Medium, High}
	_                                         = []Kind{KindJob, KindNotebook}
	_                                         = []Queueing{BestEffortFIFO, StrictFIFO}
	_                                         = Policy{Queueing: "", MinRuntimeBeforePreemption: 0}
	_                                         = WorkerPlacement{Worker: 0, Node: "", GPUs: []int{}}
	_                                         = Grant{Job: "", Attempt: 0, Placement: nil}
	_                                         = Preemption{Victim: "", VictimAttempt: 0, Preemptor: Preemptor{Job: "", Class: 0, Kind: ""}, Reason: ""}
	_                                         = NodeInfo{Name: "", Family: "", GPUs: 0, FreeGPUs: 0, AllocatedGPUs: 0, ReleasingGPUs: 0, Lost: false}
	_                                         = Adoption{Request: Request{}, Placement: []WorkerPlacement{}, StartedAt: time.Time{}, Releasing: false, Released: []int{}}
	_                                         = Snapshot{Version: SnapshotVersion, Lost: []int32{}}
	_                                         = View{Waiting: []WaitingInfo{}, Running: []RunningInfo{}, Nodes: []NodeInfo{}}
)
