package simulator

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Mode is how a faulty workload or Job misbehaves. The empty Mode leaves its availability alone: a
// fault that sets only ErrorRatio or LatencyFactor (a release that serves errors or slowly while its
// pods stay ready). NeverAvailable and LoseAvailability affect only workloads, FailJob only Jobs, Slow
// both: a fault that crash-loops every workload of a cluster ("" NeverAvailable) still lets its Jobs
// complete, and one that fails every Job ("" FailJob) leaves its workloads healthy.
type Mode string

const (
	// NeverAvailable: pods never become ready (a crash loop). A rollout of a new generation never completes
	// and a Deployment's progress deadline eventually expires; a generation that had already rolled out
	// loses its availability at once, as a crash-looping workload does.
	NeverAvailable Mode = "NeverAvailable"
	// LoseAvailability: the workload rolls out and is healthy, then After later its pods stop being ready.
	LoseAvailability Mode = "LoseAvailability"
	// Slow: a new generation becomes healthy, or a Job completes, only Delay after it was first seen.
	Slow Mode = "Slow"
	// FailJob: a Job fails (its pod exits with an error until the backoff limit is reached) instead of
	// completing. It leaves Deployments, StatefulSets and DaemonSets healthy.
	FailJob Mode = "FailJob"
)

// ParseMode returns the Mode named s, for callers that take a mode from a person (a CLI flag).
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case NeverAvailable, LoseAvailability, Slow, FailJob:
		return m, nil
	}
	return "", fmt.Errorf("unknown fault mode %q: use %s, %s, %s or %s", s, NeverAvailable, LoseAvailability, Slow, FailJob)
}

// Fault is a misbehaviour injected into the workloads and Jobs of one member cluster.
type Fault struct {
	// Workload is the name ("web") or namespace/name ("demo/web") of the Deployment, StatefulSet, DaemonSet
	// or Job it applies to, or of a CronJob, applying it to the Jobs the CronJob starts; "" applies it to
	// every workload and Job of the cluster. A named fault wins over the "" one, whatever their modes,
	// and one naming a Job over one naming its CronJob.
	Workload string
	// Mode says how the workload's availability misbehaves, or how a Job ends; "" leaves them healthy.
	Mode Mode
	// After is how long a LoseAvailability workload stays healthy, counted from when its current generation
	// became healthy or from SetFault, whichever is later (so a fault set on a long-healthy workload does not
	// fire at once).
	After time.Duration
	// Delay is how long a Slow workload's new generation takes to become healthy, or a Slow Job to
	// complete, counted from when the generation or Job was first seen or from SetFault, whichever is later.
	Delay time.Duration
	// ErrorRatio is the fraction of the workload's requests answered 500 in its simulated traffic
	// (MetricsHandler), from 0 to 1, while it has available pods; 0 answers them all 200.
	ErrorRatio float64
	// LatencyFactor multiplies the latency of the workload's requests in its simulated traffic; 0 and
	// 1 leave it as a healthy workload's.
	LatencyFactor float64
	// Image, when set, limits the fault to workloads and Jobs whose pod template has a container image
	// containing it (e.g. ":v2"): a bad release crash-loops (or answers errors, or slowly, or fails its
	// check Job), the previous one keeps working.
	Image string
}

// check says what is wrong with f, for SetFault.
func (f Fault) check() error {
	if f.Mode != "" {
		if _, err := ParseMode(string(f.Mode)); err != nil {
			return err
		}
	}
	if !(f.ErrorRatio >= 0 && f.ErrorRatio <= 1) {
		return fmt.Errorf("error ratio %v is not between 0 and 1", f.ErrorRatio)
	}
	if !(f.LatencyFactor >= 0) || math.IsInf(f.LatencyFactor, 0) {
		return fmt.Errorf("latency factor %v is not a finite number of 0 or more", f.LatencyFactor)
	}
	return nil
}

// activeFault is a Fault with the time it was set, which the After and Delay clocks never start before.
type activeFault struct {
	Fault
	since time.Time
}

// tracked is what the simulator remembers about one workload: only what its status cannot carry, all of it
// keyed by generation so that a new revision starts over (a slow cluster is slow again for it).
type tracked struct {
	// key is kind/namespace/name, as member.tracked keys it.
	key        string
	uid        string
	generation int64
	// firstSeen is when this generation was first seen; Slow delays and progress deadlines count from it.
	firstSeen time.Time
	// rolledOutAt is when this generation first had all its pods ready; zero until then. A rolled-out
	// generation keeps Progressing=NewReplicaSetAvailable even when its pods later fail, as in a real cluster.
	rolledOutAt time.Time
}

// verdict is what the pods of a workload's current generation are doing, the only input the status
// functions need besides the object.
type verdict struct {
	// ready: every pod of the current generation is ready and available.
	ready bool
	// rolledOut: the current generation finished rolling out at some point (now or before).
	rolledOut bool
	// deadlineExceeded: the generation has not rolled out within the Deployment's progress deadline.
	deadlineExceeded bool
}

// assess decides what the pods of t's generation are doing at now under fault f (nil: none), recording
// the moment the generation first rolls out. pods is how many pods the workload wants: faults are about
// pods, so a workload scaled to zero rolls out at once whatever the fault. deadline is the Deployment's
// progress deadline, 0 for none.
func (t *tracked) assess(f *activeFault, pods int32, deadline time.Duration, now time.Time) verdict {
	rolledOut := !t.rolledOutAt.IsZero()
	ready := true
	if f != nil && pods > 0 {
		switch f.Mode {
		case NeverAvailable:
			ready = false
		case Slow:
			if !rolledOut {
				ready = !now.Before(later(t.firstSeen, f.since).Add(f.Delay))
			}
		case LoseAvailability:
			if rolledOut {
				ready = now.Before(later(t.rolledOutAt, f.since).Add(f.After))
			}
		}
	}
	if ready && !rolledOut {
		t.rolledOutAt = now
		rolledOut = true
	}
	return verdict{
		ready:            ready,
		rolledOut:        rolledOut,
		deadlineExceeded: !rolledOut && deadline > 0 && now.Sub(t.firstSeen) > deadline,
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// SetFault injects f into cluster, replacing any fault set before for the same f.Workload; it takes effect
// on the next pass. It panics on an unknown cluster or mode, an error ratio outside 0 to 1 or a negative
// latency factor: each is a mistake in the calling test that would otherwise pass silently with a
// healthy workload (ParseMode checks a mode taken from a person).
func (s *Simulator) SetFault(cluster string, f Fault) {
	if _, ok := s.members[cluster]; !ok {
		panic(fmt.Sprintf("simulator: SetFault on unknown cluster %q (known: %v)", cluster, s.Clusters()))
	}
	if err := f.check(); err != nil {
		panic(fmt.Sprintf("simulator: SetFault on cluster %q: %v", cluster, err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faults[cluster] == nil {
		s.faults[cluster] = map[string]activeFault{}
	}
	s.faults[cluster][f.Workload] = activeFault{Fault: f, since: time.Now()}
}

// ClearFault removes the fault set on cluster for workload (exactly as it was given in Fault.Workload;
// "" removes the cluster-wide fault, not the named ones). The workload recovers on the next pass.
func (s *Simulator) ClearFault(cluster, workload string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.faults[cluster], workload)
}

// ClearFaults removes every fault set on cluster.
func (s *Simulator) ClearFaults(cluster string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.faults, cluster)
}

// faultFor returns the fault that applies to workload namespace/name on cluster, or nil. It returns a copy
// so that the caller can use it without the lock while a test changes faults.
func (s *Simulator) faultFor(cluster, namespace, name string, images ...string) *activeFault {
	return s.faultForAny(cluster, namespace, []string{name}, images)
}

// faultForAny is faultFor for an object known by several names, the first the most its own: the fault
// set for the first name that has one, by namespace/name before name alone, else the cluster-wide one.
func (s *Simulator) faultForAny(cluster, namespace string, names, images []string) *activeFault {
	s.mu.Lock()
	defer s.mu.Unlock()
	fs := s.faults[cluster]
	var keys []string
	for _, n := range names {
		keys = append(keys, namespace+"/"+n, n)
	}
	for _, key := range append(keys, "") {
		if f, ok := fs[key]; ok && imageMatches(f.Image, images) {
			return &f
		}
	}
	return nil
}

func imageMatches(want string, images []string) bool {
	if want == "" {
		return true
	}
	for _, img := range images {
		if strings.Contains(img, want) {
			return true
		}
	}
	return false
}
