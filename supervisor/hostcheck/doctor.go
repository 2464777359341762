package hostcheck

import (
	"bytes"
	"context"
	"deathwatch/supervisor"
	"deathwatch/supervisor/controller"
	"deathwatch/supervisor/internal/firstline"
	"deathwatch/supervisor/internal/instance"
	"deathwatch/supervisor/internal/survival"
	"deathwatch/supervisor/internal/watcherpath"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// Postures a controller can ask doctor about.
const (
	PostureRequired  = "required"  // a usable runtime, a watcher, and a passing prove-deathwatch
	PosturePreferred = "preferred" // a usable runtime
)

// DoctorRuntime is one runtime as doctor found it.
type DoctorRuntime struct {
	Name    string `json:"name"`
	Present bool   `json:"present"`
	Usable  bool   `json:"usable"`
	Version string `json:"version,omitempty"`
	Mode    string `json:"mode,omitempty"` // rootless | rootful
	Status  string `json:"status"`         // usable, or why not
	// Walls says what the runtime's boxes leave open here
	// (WallsReporter).
	Walls []string `json:"walls,omitempty"`
	// Bounds are what a box gets by default (BoundsReporter).
	Bounds []string `json:"bounds,omitempty"`
	// NoImage says why a usable runtime cannot run --image (it is not
	// in the engine's store); auto passes such a runtime over.
	NoImage string `json:"no_image,omitempty"`
}

// DoctorWatcher is a watcher doctor looked for.
type DoctorWatcher struct {
	Where   string `json:"where"` // host | image
	Path    string `json:"path,omitempty"`
	Present bool   `json:"present"`
	Version string `json:"version,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// DoctorStaging is the staging-directory visibility probe.
type DoctorStaging struct {
	Dir    string `json:"dir"`
	Mode   string `json:"mode"` // bind | copy-in
	Detail string `json:"detail"`
}

// DoctorVersion is the version of doctor --json's format
// (docs/schemas/doctor.v1.json).
const DoctorVersion = 1

// DoctorReport is everything doctor found.
type DoctorReport struct {
	V        int             `json:"v"` // DoctorVersion
	Runtimes []DoctorRuntime `json:"runtimes"`
	Cgroup   string          `json:"cgroup"`
	// Landlock is the kernel's ABI and what the agent's domain scopes
	// (landlockStatus).
	Landlock string `json:"landlock"`
	// Controller is the link to the controller exec takes by default here.
	Controller   string         `json:"controller"`
	Selected     string         `json:"selected,omitempty"`
	Chosen       string         `json:"chosen,omitempty"` // auto: which runtime it chose and why
	Image        string         `json:"image,omitempty"`
	HostWatcher  DoctorWatcher  `json:"host_watcher"`
	ImageWatcher *DoctorWatcher `json:"image_watcher,omitempty"`
	Staging      *DoctorStaging `json:"staging,omitempty"`
	Proof        *ProveReport   `json:"proof,omitempty"`
	Posture      string         `json:"posture"`
	OK           bool           `json:"ok"`
	Problems     []string       `json:"problems,omitempty"`
	ProofSkipped bool           `json:"proof_skipped,omitempty"`
	// Bound is how long a box can outlive its controller with the
	// controller's settings (DoctorOptions.Survival) on this host;
	// BoundText says it in a sentence.
	Bound     DoctorBound `json:"bound"`
	BoundText string      `json:"bound_text"`
}

// DoctorOptions is `supervisor doctor` as plain data.
type DoctorOptions struct {
	Runtime        string // a registered runtime, or "auto"
	Image          string
	WatcherInImage string
	Watcher        string // --watcher ("" = next to Self, then PATH)
	Staging        string
	AllowRootful   bool
	Posture        string
	Trials         int
	SkipProof      bool
	Timeout        time.Duration
	// Survival is the heartbeat, deadline and grace the controller's
	// exec will use (0: off).
	Survival survival.Limits

	Instance   string
	JournalDir string
	Self       string   // the supervisor binary (the proof's stand-in)
	EngineEnv  []string // for engine CLIs
	Log        *slog.Logger
}

// Doctor gathers the report.
func Doctor(ctx context.Context, d *DoctorOptions) *DoctorReport {
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rep := &DoctorReport{V: DoctorVersion, Posture: d.Posture, Image: d.Image}
	usable := doctorRuntimes(ctx, d, rep, log)
	hasWatcher := doctorWatchers(ctx, d, rep, usable)
	if rep.Selected != "" && usable[rep.Selected] && hasWatcher {
		// The staging probe and the proof need a box.
		doctorProof(ctx, d, rep, log)
	}
	doctorBound(d, rep)
	switch d.Posture {
	case PosturePreferred:
		rep.OK = rep.Selected != "" && usable[rep.Selected]
	default:
		rep.OK = len(rep.Problems) == 0
	}
	return rep
}

func (rep *DoctorReport) problem(format string, args ...any) {
	rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...))
}

// doctorRuntimes probes every registered runtime, the host's cgroup,
// controller link and Landlock, and selects the runtime to check in
// depth. It returns which runtimes are usable.
func doctorRuntimes(ctx context.Context, d *DoctorOptions, rep *DoctorReport, log *slog.Logger) map[string]bool {
	usable := map[string]bool{}
	for _, desc := range supervisor.Descriptors() {
		dr := probeRuntime(ctx, desc, d.AllowRootful, d.Image, d.EngineEnv, log)
		usable[desc.Name] = dr.Usable
		rep.Runtimes = append(rep.Runtimes, dr)
	}
	rep.Cgroup = cgroupMode()
	rep.Controller = controller.Doctor()
	rep.Landlock = landlockStatus()
	switch {
	case d.Runtime != "auto":
		rep.Selected = d.Runtime
		if !usable[d.Runtime] {
			rep.problem("runtime %s is not usable: %s", d.Runtime, runtimeStatus(rep, d.Runtime))
		}
	default:
		rep.Selected, rep.Chosen = autoSelect(rep.Runtimes, d.Image)
		if rep.Selected == "" {
			rep.problem("no usable runtime (%s)", strings.Join(statuses(rep), "; "))
		}
	}
	return usable
}

// doctorWatchers looks for the host's watcher and the image's, and
// reports whether the selected runtime has one.
func doctorWatchers(ctx context.Context, d *DoctorOptions, rep *DoctorReport, usable map[string]bool) bool {
	rep.HostWatcher = DoctorWatcher{Where: "host"}
	if p, err := watcherpath.Find(d.Watcher, d.Self); err != nil {
		rep.HostWatcher.Detail = err.Error()
	} else {
		rep.HostWatcher.Path, rep.HostWatcher.Present = p, true
		rep.HostWatcher.Version, rep.HostWatcher.Detail = watcherVersion(ctx, exec.CommandContext(ctx, p, "--version"))
	}
	if rep.Selected != "" && usable[rep.Selected] {
		rep.ImageWatcher = imageWatcher(ctx, rep.Selected, d, d.EngineEnv)
	}
	hasWatcher := rep.HostWatcher.Present || (rep.ImageWatcher != nil && rep.ImageWatcher.Present)
	if !hasWatcher {
		rep.problem("no watcher: neither on the host (%s) nor in the image", rep.HostWatcher.Detail)
	}
	if rep.ImageWatcher != nil && rep.ImageWatcher.Present && rep.HostWatcher.Present && rep.ImageWatcher.Version != rep.HostWatcher.Version {
		rep.ImageWatcher.Detail = joinNonEmpty(rep.ImageWatcher.Detail, "differs from the host's watcher ("+rep.HostWatcher.Version+")")
	}
	return hasWatcher
}

// doctorProof runs the staging probe and, unless skipped, the proof on
// the selected runtime.
func doctorProof(ctx context.Context, d *DoctorOptions, rep *DoctorReport, log *slog.Logger) {
	watcherInImage := ""
	if !rep.HostWatcher.Present {
		watcherInImage = d.WatcherInImage
	}
	rep.Staging = stagingProbe(ctx, rep.Selected, d, rep.HostWatcher.Path, watcherInImage, d.EngineEnv, log)
	if d.SkipProof {
		rep.ProofSkipped = true
		if d.Posture == PostureRequired {
			rep.problem("prove-deathwatch was skipped (--skip-proof); the required posture needs it")
		}
		return
	}
	desc, _ := supervisor.Lookup(rep.Selected)
	pr := Prove(ctx, ProveOptions{
		Self: d.Self, Instance: instance.Prove(d.Instance), JournalDir: d.JournalDir, Runtime: rep.Selected, Image: d.Image,
		Trials: d.Trials, Paths: ProvePaths, Bounds: desc.Bounds, Heartbeat: DefaultProveHeartbeat, Deadline: DefaultProveDeadline, Grace: DefaultProveGrace,
		AllowRootful: d.AllowRootful, Watcher: rep.HostWatcher.Path, WatcherInImage: watcherInImage, EngineEnv: d.EngineEnv, Log: log,
	})
	rep.Proof = pr
	if !pr.Pass && d.Posture == PostureRequired {
		why := pr.Error
		if why == "" {
			why = "a trial exceeded its bound or left something behind"
		}
		rep.problem("prove-deathwatch failed on %s: %s", rep.Selected, why)
	}
}

// doctorBound states the bound a controller gets: the kill chain's
// time as the proof measured it, else the selected runtime's dead
// bound, with the controller's heartbeat, deadline and grace.
func doctorBound(d *DoctorOptions, rep *DoctorReport) {
	slack := 250 * time.Millisecond
	if desc, ok := supervisor.Lookup(rep.Selected); ok {
		slack = desc.Bounds.Dead
	}
	if rep.Proof != nil {
		slack = rep.Proof.FrozenSlack(DefaultProveHeartbeat, slack)
	}
	rep.Bound = survivalBound(d.Survival, slack, rep.Proof != nil && rep.Proof.Pass)
	rep.BoundText = d.Survival.Statement(slack)
	if d.Survival.Unbounded() && d.Posture == PostureRequired {
		rep.problem("no bound: --heartbeat 0 and --deadline 0 leave a frozen controller's boxes running for ever; keep exec's defaults (--heartbeat 10s, --deadline 1h) or set either")
	}
}

// autoSelect is exec's --runtime auto over doctor's rows: in auto's
// order, the first usable runtime with no daemon or a rootless one that
// has the image, else the first usable rootful one that has it (a
// rootful row is usable only with --allow-rootful).
func autoSelect(rows []DoctorRuntime, image string) (selected, chosen string) {
	byName := map[string]DoctorRuntime{}
	for _, r := range rows {
		byName[r.Name] = r
	}
	var passed []string
	rootful := ""
	for _, name := range supervisor.AutoOrder() {
		r := byName[name]
		d, _ := supervisor.Lookup(name)
		switch {
		case !r.Usable:
			passed = append(passed, name+": "+r.Status)
		case r.NoImage != "":
			passed = append(passed, r.NoImage)
		case !d.Daemon || r.Mode == "rootless":
			return name, supervisor.AutoChoice(name, r.Mode == "rootless", image, passed)
		case rootful == "":
			rootful = name
		}
	}
	if rootful != "" {
		return rootful, supervisor.AutoChoice(rootful, false, image, passed)
	}
	return "", ""
}

func probeRuntime(ctx context.Context, desc supervisor.Descriptor, allowRootful bool, image string, env []string, log *slog.Logger) DoctorRuntime {
	name := desc.Name
	dr := DoctorRuntime{Name: name}
	if err := desc.Installed(env); err != nil {
		dr.Status = err.Error()
		return dr
	}
	rt, err := supervisor.NewRuntime(name, supervisor.RuntimeConfig{Log: log, EngineEnv: env})
	if err != nil {
		dr.Status = err.Error()
		return dr
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := rt.Probe(pctx)
	dr.Present, dr.Version = info.Present || info.Version != "", info.Version
	if info.Present || info.Version != "" {
		dr.Mode = "rootful"
		if info.Rootless {
			dr.Mode = "rootless"
		}
		if !desc.Daemon {
			dr.Mode = "root"
			if info.Rootless {
				dr.Mode = "unprivileged"
			}
		}
	}
	switch {
	case err != nil:
		dr.Status = err.Error()
	case !info.Present:
		dr.Status = info.Detail
		if dr.Status == "" {
			dr.Status = "not available"
		}
	case desc.Daemon && !info.Rootless && !allowRootful:
		dr.Status = "refused: rootful (a box escape is root on the host); pass --allow-rootful to accept it"
		if info.Detail != "" { // what the engine's own setting means (docker without userns-remap)
			dr.Status += " (" + info.Detail + ")"
		}
	default:
		dr.Usable = true
		dr.Status = "usable"
		if wr, ok := rt.(WallsReporter); ok {
			dr.Walls = wr.Walls()
		}
		if br, ok := rt.(BoundsReporter); ok {
			dr.Bounds = br.Bounds()
		}
		if info.Detail != "" {
			dr.Status += " (" + info.Detail + ")"
		}
		if desc.Daemon && !info.Rootless {
			dr.Status += " (rootful, allowed by --allow-rootful)"
		}
		if ic, ok := rt.(supervisor.ImageChecker); ok && image != "" {
			if err := ic.CheckImage(pctx, image); err != nil {
				dr.NoImage = err.Error()
				dr.Status += "; " + dr.NoImage
			}
		}
	}
	return dr
}

func runtimeStatus(rep *DoctorReport, name string) string {
	for _, r := range rep.Runtimes {
		if r.Name == name {
			return r.Status
		}
	}
	return "unknown runtime"
}

func statuses(rep *DoctorReport) []string {
	var s []string
	for _, r := range rep.Runtimes {
		s = append(s, r.Name+": "+r.Status)
	}
	return s
}

// watcherVersion runs cmd (a watcher with --version) and returns the
// version line, or why it could not.
func watcherVersion(ctx context.Context, cmd *exec.Cmd) (version, detail string) {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		msg := firstline.Of(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", msg
	}
	v := firstline.Of(out.String())
	return strings.TrimPrefix(v, "watcher "), ""
}

func imageWatcher(ctx context.Context, runtime string, d *DoctorOptions, env []string) *DoctorWatcher {
	w := &DoctorWatcher{Where: "image", Path: d.WatcherInImage}
	desc, _ := supervisor.Lookup(runtime)
	if d.Image == "" {
		w.Detail = "no --image given"
		if desc.Has(supervisor.CapHostWatcherOnly) {
			w.Detail = fmt.Sprintf("no --image given: the %s box runs the host's watcher", runtime)
		}
		return w
	}
	cctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	var cmd *exec.Cmd
	if desc.Has(supervisor.CapHostWatcherOnly) {
		p := filepath.Join(d.Image, d.WatcherInImage)
		if _, err := os.Stat(p); err != nil {
			w.Detail = fmt.Sprintf("no watcher at %s in the rootfs (the %s box bind-mounts the host's)", d.WatcherInImage, runtime)
			return w
		}
		cmd = exec.CommandContext(cctx, p, "--version")
	} else {
		rt, err := supervisor.NewRuntime(runtime, supervisor.RuntimeConfig{EngineEnv: env})
		if err != nil {
			w.Detail = err.Error()
			return w
		}
		wc, ok := rt.(WatcherVersionCommander)
		if !ok {
			w.Detail = fmt.Sprintf("%s cannot run the image's watcher on its own", runtime)
			return w
		}
		cmd = wc.WatcherVersionCommand(cctx, d.Image, d.WatcherInImage)
	}
	v, detail := watcherVersion(cctx, cmd)
	if v == "" || !strings.Contains(v, "protocol") {
		w.Detail = fmt.Sprintf("no watcher at %s in %s (exec bind-mounts the host's): %s", d.WatcherInImage, d.Image, detail)
		return w
	}
	w.Present, w.Version = true, v
	return w
}

// stagingProbe decides bind vs copy-in by proof: a nonce file in the
// staging directory, bind-mounted read-only into a real box, must read
// back the same from inside.
func stagingProbe(ctx context.Context, runtime string, d *DoctorOptions, watcher, watcherInImage string, env []string, log *slog.Logger) *DoctorStaging {
	st := &DoctorStaging{Mode: "copy-in"}
	dir := d.Staging
	if dir == "" {
		tmp, err := os.MkdirTemp("", "deathwatch-staging-")
		if err != nil {
			st.Detail = fmt.Sprintf("cannot make a staging directory: %v", err)
			return st
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		st.Detail = err.Error()
		return st
	}
	st.Dir = abs
	ok, detail := supervisor.ProveBind(ctx, supervisor.ExecOptions{
		Instance: d.Instance, JournalDir: d.JournalDir, Image: d.Image, AllowRootful: d.AllowRootful,
		WatcherPath: watcher, WatcherInImage: watcherInImage,
		IO: supervisor.ExecIO{Log: log, EngineEnv: env},
	}, runtime, abs, d.Timeout)
	if ok {
		st.Mode = "bind"
	}
	st.Detail = detail
	return st
}

// WriteDoctorTable prints the report for a person.
func WriteDoctorTable(w io.Writer, rep *DoctorReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUNTIME\tPRESENT\tVERSION\tMODE\tSTATUS")
	for _, r := range rep.Runtimes {
		present := "no"
		if r.Present {
			present = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, present, dash(r.Version), dash(r.Mode), r.Status)
	}
	tw.Flush()
	fmt.Fprintf(w, "\ncgroup:           %s\n", rep.Cgroup)
	fmt.Fprintf(w, "controller link:  %s\n", rep.Controller)
	fmt.Fprintf(w, "landlock:         %s\n", rep.Landlock)
	fmt.Fprintf(w, "selected runtime: %s\n", dash(rep.Selected))
	if rep.Chosen != "" {
		fmt.Fprintf(w, "                  %s\n", rep.Chosen)
	}
	hw := rep.HostWatcher
	if hw.Present {
		fmt.Fprintf(w, "host watcher:     %s (%s)\n", hw.Path, dash(hw.Version))
	} else {
		fmt.Fprintf(w, "host watcher:     none (%s)\n", hw.Detail)
	}
	if iw := rep.ImageWatcher; iw != nil {
		if iw.Present {
			fmt.Fprintf(w, "image watcher:    %s in %s (%s)", iw.Path, rep.Image, iw.Version)
			if iw.Detail != "" {
				fmt.Fprintf(w, "; %s", iw.Detail)
			}
			fmt.Fprintln(w)
		} else {
			fmt.Fprintf(w, "image watcher:    none (%s)\n", iw.Detail)
		}
	}
	if st := rep.Staging; st != nil {
		fmt.Fprintf(w, "staging:          %s → %s (%s)\n", dash(st.Dir), st.Mode, st.Detail)
	}
	for _, r := range rep.Runtimes {
		if r.Name == rep.Selected {
			for _, l := range r.Walls {
				fmt.Fprintf(w, "walls:            %s\n", l)
			}
		}
	}
	for _, r := range rep.Runtimes {
		if len(r.Bounds) > 0 {
			fmt.Fprintf(w, "%-18s%s\n", "bounds "+r.Name+":", strings.Join(r.Bounds, ", "))
		}
	}
	switch {
	case rep.Proof != nil:
		fmt.Fprintln(w)
		WriteProveTable(w, rep.Proof)
	case rep.ProofSkipped:
		fmt.Fprintf(w, "prove-deathwatch: skipped\n")
	}
	fmt.Fprintln(w)
	if rep.BoundText != "" {
		fmt.Fprintf(w, "bound:            %s\n", rep.BoundText)
	}
	if rep.OK {
		fmt.Fprintf(w, "posture %s: met\n", rep.Posture)
	} else {
		fmt.Fprintf(w, "posture %s: NOT met\n", rep.Posture)
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "  - %s\n", p)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
