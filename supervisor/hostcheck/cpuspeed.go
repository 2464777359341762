package hostcheck

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"time"

	"deathwatch/supervisor/proc"
)

// A slow CPU (an emulated one: qemu without KVM) makes every hop of the
// kill chain take longer without making any of them late to wake, so
// the host-delay allowance (hostdelay.go) does not see it. The proof
// times one hop of the chain itself before its first trial — SIGKILL a
// sleeping child and reap it, the watcher's kill and the victim's exit —
// keeps the fastest of cpuSamples (load only ever slows one) and
// compares it with cpuReference. A CPU that many times slower is allowed
// the kill chain's part of each bound that many times over; a factor
// under 1 counts as 1 (a fast CPU does not tighten a bound), and
// --strict allows nothing. The child is started and seen asleep before
// the clock starts: an exec is no measure of a warm kill chain (an
// emulator translates a fresh program's code on its first run).
const (
	// cpuReference is the reference speed: the hop in this long is a
	// factor of 1. docs/design.md says what hosts take.
	cpuReference = 200 * time.Microsecond
	cpuSamples   = 9
	cpuTimeout   = 60 * time.Second
	cpuWork      = "SIGKILL and reap of a sleeping child (sleep 3600)"
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

// measureCPU times the reference hop on this host cpuSamples times.
func measureCPU(ctx context.Context, o *ProveOptions) CPUSpeed {
	c := CPUSpeed{Work: cpuWork, ReferenceNS: int64(cpuReference), Factor: 1}
	ctx, cancel := context.WithTimeout(ctx, cpuTimeout)
	defer cancel()
	var best time.Duration
	for i := 0; i < cpuSamples; i++ {
		d, err := killReap(ctx)
		if err != nil {
			c.Error = err.Error()
			return c
		}
		if best == 0 || d < best {
			best = d
		}
		c.Samples++
	}
	c.MeasuredNS = int64(best)
	c.Factor = cpuFactor(best, cpuReference)
	c.Applied = c.Factor > 1 && !o.Strict
	return c
}

// killReap starts `sleep 3600`, waits until the kernel shows it asleep
// as sleep, and times its SIGKILL and reap.
func killReap(ctx context.Context) (time.Duration, error) {
	cmd := exec.Command("sleep", "3600")
	cmd.Env = []string{}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start the CPU reference's child: %w", err)
	}
	pid := cmd.Process.Pid
	stat := fmt.Sprintf("/proc/%d/stat", pid)
	for {
		if b, err := os.ReadFile(stat); err == nil {
			if st, err := proc.ParseStat(pid, b); err == nil && st.Comm == "sleep" && st.State == 'S' {
				break
			}
		}
		if ctx.Err() != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return 0, fmt.Errorf("the CPU reference's child was not seen asleep: %w", ctx.Err())
		}
		time.Sleep(time.Millisecond)
	}
	t := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		cmd.Wait()
		return 0, fmt.Errorf("kill the CPU reference's child: %w", err)
	}
	cmd.Wait()
	return time.Since(t), nil
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
