package hostcheck

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"time"

	"deathwatch/supervisor"
)

// A slow CPU (an emulated one: qemu without KVM) makes every hop of the
// kill chain take longer without making any of them late to wake, so
// the host-delay allowance (hostdelay.go) does not see it. The proof
// times a fixed piece of the chain's own kind of work — fork, exec and
// wait of the watcher binary, the program that does the killing,
// printing its version — before its first trial, keeps the fastest of
// cpuSamples runs (load only ever slows a run) and compares it with
// cpuReference. A CPU that many times slower is allowed the kill
// chain's part of each bound that many times over; a factor under 1
// counts as 1 (a fast CPU does not tighten a bound), and --strict
// allows nothing.
const (
	// cpuReference is the reference speed: the work in this long is a
	// factor of 1. docs/prove-deathwatch.md says which CPUs meet it.
	cpuReference = time.Millisecond
	cpuSamples   = 5
	cpuTimeout   = 30 * time.Second
)

// CPUSpeed is the proof's CPU-speed reference as measured on this host.
type CPUSpeed struct {
	Work        string `json:"work"`         // what was timed
	ReferenceNS int64  `json:"reference_ns"` // what it takes at factor 1
	// MeasuredNS is the fastest of Samples runs; 0: not measured (Error).
	MeasuredNS int64 `json:"measured_ns"`
	Samples    int   `json:"samples"`
	// Factor is measured / reference to a tenth, at least 1; 1 when not
	// measured.
	Factor float64 `json:"factor"`
	// Applied says whether the trials were allowed the factor: not
	// under --strict, not when unmeasured, not at 1.
	Applied bool   `json:"applied"`
	Error   string `json:"error,omitempty"` // why it was not measured
}

// cpuFactor is measured / reference to a tenth, at least 1.
func cpuFactor(measured, reference time.Duration) float64 {
	if measured <= 0 || reference <= 0 {
		return 1
	}
	return max(1, math.Round(float64(measured)/float64(reference)*10)/10)
}

// cpuAllowance is what a CPU factor times slower allows on top of a
// kill chain bound: the bound (factor − 1) times over.
func cpuAllowance(chain time.Duration, factor float64) time.Duration {
	if factor <= 1 || chain <= 0 {
		return 0
	}
	return time.Duration(float64(chain) * (factor - 1)).Round(time.Microsecond)
}

// measureCPU times the reference work on this host: fork, exec and wait
// of the watcher (o.Watcher, else the one exec would find) with
// --version, cpuSamples times, in an empty environment.
func measureCPU(ctx context.Context, o *ProveOptions) CPUSpeed {
	c := CPUSpeed{ReferenceNS: int64(cpuReference), Factor: 1}
	w, err := supervisor.FindWatcher(o.Watcher, o.Self)
	if err != nil {
		c.Work = "fork+exec+wait of the host watcher --version"
		c.Error = fmt.Sprintf("no host watcher to time: %v", err)
		return c
	}
	c.Work = "fork+exec+wait of " + w + " --version"
	ctx, cancel := context.WithTimeout(ctx, cpuTimeout)
	defer cancel()
	var best time.Duration
	for i := 0; i < cpuSamples; i++ {
		cmd := exec.CommandContext(ctx, w, "--version")
		cmd.Env = []string{}
		t := time.Now()
		if err := cmd.Run(); err != nil {
			c.Error = fmt.Sprintf("run %s --version: %v", w, err)
			return c
		}
		if d := time.Since(t); best == 0 || d < best {
			best = d
		}
		c.Samples++
	}
	c.MeasuredNS = int64(best)
	c.Factor = cpuFactor(best, cpuReference)
	c.Applied = c.Factor > 1 && !o.Strict
	return c
}

// Statement says the measure in a sentence.
func (c *CPUSpeed) Statement() string {
	if c.MeasuredNS == 0 {
		return fmt.Sprintf("not measured (%s): no allowance for a slow CPU", c.Error)
	}
	s := fmt.Sprintf("%s took %s at best of %d (reference %v): ", c.Work, fmtDur(time.Duration(c.MeasuredNS)), c.Samples, time.Duration(c.ReferenceNS))
	switch {
	case c.Factor <= 1:
		return s + "not slower than the reference: no allowance"
	case !c.Applied:
		return s + fmt.Sprintf("CPU %.1f× slower than the reference; --strict: no allowance", c.Factor)
	}
	return s + fmt.Sprintf("CPU %.1f× slower than the reference: bound allowance ×%.1f", c.Factor, c.Factor)
}
