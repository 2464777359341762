package supervisor

// Picking the runtime: a named one, or --runtime auto among the installed ones.

import (
	"context"
	"fmt"
	"strings"

	"deathwatch/shared"
	"deathwatch/supervisor/exitcode"
)

// picked is the runtime exec drives and what its probe found; oneStep:
// the runtime, whose OneStep said yes (CreateStart creates and starts
// the box), nil otherwise.
type picked struct {
	rt      Runtime
	info    Info
	oneStep OneStepStarter
	chosen  string // auto: the line that says what it chose and why
}

func pickRuntime(ctx context.Context, o *ExecOptions, cfg RuntimeConfig) (picked, error) {
	try := func(name string, refuseRootful bool) (picked, error) {
		return tryRuntime(ctx, o, cfg, name, refuseRootful)
	}
	if o.Runtime != "auto" && o.Runtime != "" {
		return try(o.Runtime, true)
	}
	// auto: in AutoOrder, the first rootless engine that has the image,
	// else the daemonless native runtime, else the first rootful engine
	// with the image when --allow-rootful accepts one.
	var why []string
	var rootful []picked
	noImage := 0
	for _, name := range AutoOrder() {
		d, _ := Lookup(name)
		p, err := try(name, false)
		switch {
		case err != nil:
			why = append(why, err.Error())
			if exitcode.Of(err, 0) == shared.ExitImage {
				noImage++
			}
		case !d.Daemon || p.info.Rootless:
			p.chosen = AutoChoice(name, p.info.Rootless, o.Image, why)
			return p, nil
		case o.AllowRootful:
			rootful = append(rootful, p)
		default:
			why = append(why, name+" is rootful (pass --allow-rootful to accept it)")
		}
	}
	if len(rootful) > 0 {
		p := rootful[0]
		p.chosen = AutoChoice(p.rt.Name(), p.info.Rootless, o.Image, why)
		return p, nil
	}
	err := exitcode.Engine("--runtime auto: no usable runtime (%s)", strings.Join(why, "; "))
	if noImage > 0 {
		// An engine works, the image is not in it: load the image.
		return picked{}, exitcode.With(shared.ExitImage, err)
	}
	return picked{}, err
}

// tryRuntime probes the runtime called name (beside its image check),
// and says whether it can run the box; refuseRootful applies
// --allow-rootful (--runtime auto weighs a rootful engine itself).
// Local Podman's one-step path probes only for auto, and checks the
// image after the probe.
func tryRuntime(ctx context.Context, o *ExecOptions, cfg RuntimeConfig, name string, refuseRootful bool) (picked, error) {
	rt, err := NewRuntime(name, cfg)
	if err != nil {
		return picked{}, err
	}
	d, _ := Lookup(name)
	if _, ok := rt.(ImageChecker); ok && o.Image == "" && !d.Has(CapImageOptional) {
		return picked{}, exitcode.Usage("--image is required for --runtime %s", name)
	}
	// usable says whether the probe found the engine usable.
	usable := func(info Info, err error) error {
		if err != nil {
			return exitcode.With(exitcode.Of(err, shared.ExitEngine), err)
		}
		if !info.Present {
			d := info.Detail
			if d == "" {
				d = name + " is not available"
			}
			return exitcode.Engine("%s", d)
		}
		if refuseRootful && d.Daemon && !info.Rootless && !o.AllowRootful {
			return exitcode.Refused("%s engine is rootful (a box escape is root on the host); pass --allow-rootful to accept a shared-root boundary, or use rootless %s", name, name)
		}
		return nil
	}
	if one, ok := rt.(OneStepStarter); ok {
		// One engine client creates and starts the box, and finds a
		// missing image itself: no probe, no image check of its own.
		// Except for --runtime auto, which must know that an engine
		// works before it picks it over the next one: it probes.
		if info, yes, err := one.OneStep(ctx); yes {
			if err == nil && !refuseRootful {
				info, err = rt.Probe(ctx)
			}
			if err := usable(info, err); err != nil {
				return picked{info: info}, err
			}
			if ic, ok := rt.(ImageChecker); ok && !refuseRootful {
				// auto picks an engine only when the image is there.
				if err := ic.CheckImage(ctx, o.Image); err != nil {
					return picked{info: info}, exitcode.With(exitcode.Of(err, shared.ExitImage), err)
				}
			}
			return picked{rt: rt, info: info, oneStep: one}, nil
		}
	}
	// The image check runs beside the probe (two engine round trips
	// in the time of one); its verdict counts only once the engine
	// is known to be usable.
	imageErr := make(chan error, 1)
	ictx, cancel := context.WithCancel(ctx)
	defer func() {
		// Leave no engine call running behind us.
		cancel()
		<-imageErr
	}()
	if ic, ok := rt.(ImageChecker); ok {
		go func() { imageErr <- ic.CheckImage(ictx, o.Image) }()
	} else {
		imageErr <- nil
	}
	info, err := rt.Probe(ctx)
	if err := usable(info, err); err != nil {
		return picked{info: info}, err
	}
	if err := <-imageErr; err != nil {
		imageErr <- nil
		return picked{info: info}, exitcode.With(exitcode.Of(err, shared.ExitImage), err)
	}
	imageErr <- nil
	return picked{rt: rt, info: info}, nil
}

// AutoChoice is the line that says which runtime auto chose and why,
// with what it passed over on the way (exec and doctor say it): image
// is the image an engine was checked for ("": none was, doctor without
// --image).
func AutoChoice(name string, rootless bool, image string, passed []string) string {
	s := fmt.Sprintf("--runtime auto chose %s (no daemon)", name)
	if d, _ := Lookup(name); d.Daemon {
		mode := "rootless"
		if !rootless {
			mode = "rootful, accepted by --allow-rootful"
		}
		has := "image " + image + " present"
		if image == "" {
			has = "no image checked: pass the controller's --image to choose by it, as exec does"
		}
		s = fmt.Sprintf("--runtime auto chose %s (%s, %s)", name, mode, has)
	}
	if len(passed) > 0 {
		s += "; passed over: " + strings.Join(passed, "; ")
	}
	return s
}
