package cli

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/alecthomas/kong"

	"deathwatch/supervisor"
)

// fastExec parses the plain form of an exec command line, the one a
// controller sends on every launch, straight into an execCLI: global
// and exec flags as --name VALUE, --name=VALUE or bare booleans,
// clustered boolean short flags (-it), then "--" and the agent command.
// It reads the flags' names, environment variables, defaults and enums
// from execCLI's own tags, as kong does (TestFastExecIsKong holds them
// to kong's model). ok is false for anything else (an unknown or
// repeated flag, a value that needs kong's reading, help, an error):
// kong then parses the line and says what is wrong with it.
//
// kong.New reflects over every field and interpolates every tag on each
// start; a launch needs none of that.
func fastExec(args []string, getenv func(string) (string, bool)) (e *execCLI, ok bool) {
	fs := fastFlags()
	if fs == nil {
		return nil, false
	}
	e = &execCLI{}
	root := reflect.ValueOf(e).Elem()
	set := make([]bool, len(fs.flags))
	exec := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if !exec || i+1 == len(args) {
				return nil, false
			}
			// kong's passthrough keeps the "--" (options drops it).
			cmd := root.FieldByIndex(fs.command)
			cmd.Set(reflect.ValueOf(append([]string(nil), args[i:]...)))
			return e, fs.fill(root, set, getenv)
		case a == "exec" && !exec:
			exec = true
		case strings.HasPrefix(a, "--"):
			name, value, hasValue := strings.Cut(a[2:], "=")
			k := fs.lookup(name, exec)
			if k < 0 {
				return nil, false
			}
			f := &fs.flags[k]
			if f.kind == reflect.Bool {
				if hasValue {
					return nil, false
				}
				value = "true"
			} else if !hasValue {
				if i+1 == len(args) || strings.HasPrefix(args[i+1], "-") {
					return nil, false
				}
				i++
				value = args[i]
			}
			if set[k] && !f.slice {
				return nil, false
			}
			if !f.decode(root.FieldByIndex(f.index), value) {
				return nil, false
			}
			set[k] = true
		case len(a) > 1 && a[0] == '-' && exec:
			for _, r := range a[1:] {
				k := fs.short(r)
				if k < 0 || set[k] {
					return nil, false
				}
				root.FieldByIndex(fs.flags[k].index).SetBool(true)
				set[k] = true
			}
		default:
			return nil, false
		}
	}
	return nil, false // no "--": kong reads the command
}

// fastFlag is one flag of execCLI as fastExec reads it.
type fastFlag struct {
	name, env, def string
	short          rune
	enum           []string
	index          []int
	kind           reflect.Kind // of the value (the element of a slice)
	duration       bool
	slice          bool
	global         bool
}

// fastFlagSet is execCLI's flags, worked out from its tags once.
type fastFlagSet struct {
	flags   []fastFlag
	command []int // the index of ExecCmd.Command
}

// fastFlags is nil when execCLI holds a field fastExec cannot read
// as kong does: every exec then goes to kong.
var fastFlags = sync.OnceValue(buildFastFlags)

func buildFastFlags() *fastFlagSet {
	// The variables of the defaults and enums (help text is not read).
	vars := defaultVars().CloneWith(kong.Vars{"runtimes": strings.Join(supervisor.RuntimeNames(), ",")})
	fs := &fastFlagSet{}
	if !fs.walk(reflect.TypeOf(execCLI{}), nil, "", true, vars) || fs.command == nil {
		return nil
	}
	return fs
}

var durationType = reflect.TypeFor[time.Duration]()

// walk adds t's flags (index: t's place in execCLI, prefix: its
// embedding's) and reports whether fastExec can read them all.
func (fs *fastFlagSet) walk(t reflect.Type, index []int, prefix string, global bool, vars map[string]string) bool {
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		idx := append(append([]int(nil), index...), i)
		tag := sf.Tag
		switch {
		case !sf.IsExported():
			continue
		case hasTag(tag, "cmd"):
			if sf.Type.Kind() != reflect.Struct || !fs.walk(sf.Type, idx, "", false, vars) {
				return false
			}
			continue
		case hasTag(tag, "embed") || sf.Anonymous:
			if sf.Type.Kind() != reflect.Struct || !fs.walk(sf.Type, idx, prefix+tag.Get("prefix"), global, vars) {
				return false
			}
			continue
		case hasTag(tag, "arg"):
			if sf.Type != reflect.TypeFor[[]string]() || tag.Get("passthrough") != "partial" || fs.command != nil {
				return false
			}
			fs.command = idx
			continue
		}
		for _, k := range []string{"negatable", "xor", "and", "required", "type", "mapper", "aliases", "format"} {
			if hasTag(tag, k) {
				return false
			}
		}
		f := fastFlag{name: prefix + flagName(sf), env: tag.Get("env"), index: idx, global: global}
		f.def = interpolateTag(tag.Get("default"), vars)
		if e := interpolateTag(tag.Get("enum"), vars); e != "" {
			f.enum = strings.Split(e, ",")
		}
		if s := tag.Get("short"); s != "" {
			r := []rune(s)
			if len(r) != 1 {
				return false
			}
			f.short = r[0]
		}
		vt := sf.Type
		if vt.Kind() == reflect.Slice {
			if tag.Get("sep") != "none" {
				return false
			}
			f.slice, vt = true, vt.Elem()
		}
		f.kind, f.duration = vt.Kind(), vt == durationType
		switch f.kind {
		case reflect.String, reflect.Int, reflect.Int64:
		case reflect.Bool:
			if f.slice || (f.def != "" && f.def != "false") {
				return false
			}
		default:
			return false
		}
		if f.short != 0 && f.kind != reflect.Bool {
			return false
		}
		if strings.Contains(f.def, "${") || (f.slice && f.def != "") {
			return false
		}
		fs.flags = append(fs.flags, f)
	}
	return true
}

// hasTag reports whether tag names key, with or without a value.
func hasTag(tag reflect.StructTag, key string) bool {
	_, ok := tag.Lookup(key)
	return ok
}

// interpolateTag is s with each ${name} of vars replaced.
func interpolateTag(s string, vars map[string]string) string {
	for name, v := range vars {
		s = strings.ReplaceAll(s, "${"+name+"}", v)
	}
	return s
}

// flagName is the field's flag name: its name tag, else its Go name in
// lower case, dashed between words (an initialism is one word), as kong
// names it.
func flagName(sf reflect.StructField) string {
	if n := sf.Tag.Get("name"); n != "" {
		return n
	}
	r := []rune(sf.Name)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) && (unicode.IsLower(r[i-1]) || (i+1 < len(r) && unicode.IsLower(r[i+1]))) {
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// lookup is the index of the flag name, -1 for none; before the exec
// word only the global flags are known.
func (fs *fastFlagSet) lookup(name string, exec bool) int {
	for k := range fs.flags {
		if f := &fs.flags[k]; f.name == name && (exec || f.global) {
			return k
		}
	}
	return -1
}

// short is the index of the boolean flag with short name r, -1 for none.
func (fs *fastFlagSet) short(r rune) int {
	for k := range fs.flags {
		if fs.flags[k].short == r {
			return k
		}
	}
	return -1
}

// fill gives each flag the command line did not set its value from its
// environment variable, else its default; ok is false where kong must
// read one (an empty variable, or one of a flag that is no string).
func (fs *fastFlagSet) fill(root reflect.Value, set []bool, getenv func(string) (string, bool)) bool {
	for k := range fs.flags {
		f := &fs.flags[k]
		if set[k] {
			continue
		}
		v := root.FieldByIndex(f.index)
		if f.env != "" && getenv != nil {
			if s, ok := getenv(f.env); ok {
				if s == "" || f.kind != reflect.String || f.slice || !f.decode(v, s) {
					return false
				}
				continue
			}
		}
		if f.def != "" && f.kind != reflect.Bool && !f.decode(v, f.def) {
			return false
		}
	}
	return true
}

// decode sets v (the flag's field) from s as kong reads it, or reports
// false for a value kong would refuse.
func (f *fastFlag) decode(v reflect.Value, s string) bool {
	if len(f.enum) > 0 && !slices.Contains(f.enum, s) {
		return false
	}
	var x reflect.Value
	switch {
	case f.kind == reflect.Bool:
		x = reflect.ValueOf(true)
	case f.kind == reflect.String:
		x = reflect.ValueOf(s)
	case f.duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return false
		}
		x = reflect.ValueOf(d)
	default:
		n, err := strconv.ParseInt(s, 0, 64)
		if err != nil {
			return false
		}
		x = reflect.New(v.Type()).Elem()
		if f.slice {
			x = reflect.New(v.Type().Elem()).Elem()
		}
		if x.OverflowInt(n) {
			return false
		}
		x.SetInt(n)
	}
	if f.slice {
		v.Set(reflect.Append(v, x.Convert(v.Type().Elem())))
		return true
	}
	v.Set(x.Convert(v.Type()))
	return true
}
