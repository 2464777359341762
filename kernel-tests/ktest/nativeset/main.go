// Command nativeset prints the -test.run pattern of the kernel tests that
// need no engine and no cluster: the native runtime's set, which the VM
// rig runs in its guests (DEATHWATCH_RIGS=native,native-unprivileged).
// It reads the tests' source, so a new test joins the set by what it
// uses, never by a list kept by hand.
//
//	nativeset [-unprivileged] [-landlock ABI] [-v] [DIR]
//
// DIR is the kernel tests' folder (default: kernel-tests of this
// checkout). A test needs an engine when anything it reaches (its body,
// the package's functions and methods it calls, the package variables it
// reads) names an engine rig or tool as a literal argument ("docker",
// "podman", "kubectl", ...), or calls a ktest helper of an engine or the
// cluster (ktest.Docker*, ktest.Podman*, ktest.K8s*, ktest.Sbx*, ...),
// or runs provision.sh (the engine machine's set-up).
// With -unprivileged it prints those of the set that run the supervisor
// as the unprivileged user (they name ktest.RootlessUser or the
// native-unprivileged rig, or take every rig the machine has). With
// -landlock it leaves out the tests that require a Landlock ABI above
// ABI (they call requireLandlock, which fails them on such a kernel).
// With -v it says on stderr why each other test is left out.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// engineWords are literals that name an engine, its rig or its CLI.
var engineWords = map[string]bool{
	"docker": true, "podman": true, "podman-rootless": true, "docker-rootless": true,
	"kubectl": true, "sbx": true, "dockerd": true, "crictl": true,
}

// engineHelpers are the ktest helpers of an engine, a cluster or sbx.
var engineHelpers = []string{"Docker", "Podman", "RootlessPodman", "K8s", "RequireK8s", "Sbx", "PodSecurity", "LaneKubernetes", "ImageWatcher"}

// node is one function, method or package variable of the tests.
type node struct {
	name   string
	engine string      // why it needs an engine itself, or ""
	picks  string      // an engine it compares a name with (a test that picks that rig), or ""
	unpriv bool        // it runs something as the unprivileged user itself
	abi    int64       // the Landlock ABI it requires itself (requireLandlock), or 0
	refs   []token.Pos // where the package's objects it uses are declared
}

func main() {
	unpriv := flag.Bool("unprivileged", false, "print the tests of the set that run as the unprivileged user")
	verbose := flag.Bool("v", false, "say on stderr why each other test is left out")
	abi := flag.Int64("landlock", -1, "leave out the tests that require a Landlock ABI above this one (-1: none left out)")
	flag.Parse()
	dir := flag.Arg(0)
	if dir == "" {
		dir = "kernel-tests"
	}
	names, nodes, tests, err := load(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nativeset: %v\n", err)
		os.Exit(1)
	}
	var set []string
	for _, name := range names {
		why, u, need := reach(tests[name], nodes)
		if why == "" && *abi >= 0 && need > *abi {
			why = fmt.Sprintf("requires Landlock ABI %d (the kernel has %d)", need, *abi)
		}
		switch {
		case why != "":
			if *verbose {
				fmt.Fprintf(os.Stderr, "nativeset: %s left out: %s\n", name, why)
			}
		case *unpriv && !u:
		default:
			set = append(set, name)
		}
	}
	if len(set) == 0 {
		fmt.Fprintf(os.Stderr, "nativeset: no test in %s is of the set\n", dir)
		os.Exit(1)
	}
	fmt.Printf("^(%s)$\n", strings.Join(set, "|"))
}

// load parses and type-checks dir's _test.go files: the Test functions'
// names, sorted, and a node for every function, method and package
// variable, keyed by where it is declared.
func load(dir string) ([]string, map[token.Pos]*node, map[string]token.Pos, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		return nil, nil, nil, fmt.Errorf("no _test.go files in %s", dir)
	}
	fset := token.NewFileSet()
	var afs []*ast.File
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("parse %s: %w", f, err)
		}
		afs = append(afs, af)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	var typeErr error
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil), Error: func(err error) {
		if typeErr == nil {
			typeErr = err
		}
	}}
	conf.Check(afs[0].Name.Name, fset, afs, info)
	if typeErr != nil {
		return nil, nil, nil, fmt.Errorf("type-check %s: %w", dir, typeErr)
	}
	nodes := map[token.Pos]*node{}
	tests := map[string]token.Pos{}
	var names []string
	for _, af := range afs {
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				name := d.Name.Name
				if d.Recv == nil && strings.HasPrefix(name, "Test") && name != "TestMain" {
					names = append(names, name)
					tests[name] = d.Name.Pos()
				}
				nodes[d.Name.Pos()] = scan(name, d, info)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if vs, ok := s.(*ast.ValueSpec); ok {
						for _, id := range vs.Names {
							nodes[id.Pos()] = scan(id.Name, vs, info)
						}
					}
				}
			}
		}
	}
	sort.Strings(names)
	return names, nodes, tests, nil
}

// scan is what n needs itself and where the package's objects it uses
// are declared.
func scan(name string, n ast.Node, info *types.Info) *node {
	nd := &node{name: name}
	ast.Inspect(n, func(x ast.Node) bool {
		switch x := x.(type) {
		case *ast.CallExpr:
			for _, a := range x.Args {
				if w := literal(a); w == "provision.sh" && nd.engine == "" {
					nd.engine = "runs provision.sh"
				}
			}
			if id, ok := x.Fun.(*ast.Ident); ok && id.Name == "requireLandlock" && len(x.Args) >= 2 {
				nd.abi = max(nd.abi, intConst(x.Args[1], info))
			}
			if textCall(x) {
				break
			}
			for _, a := range x.Args {
				if w := literal(a); engineWords[w] && nd.engine == "" {
					nd.engine = fmt.Sprintf("passes %q", w)
				}
				if literal(a) == "native-unprivileged" {
					nd.unpriv = true
				}
			}
			// rigs(t) with no rig named takes every rig the machine has.
			if id, ok := x.Fun.(*ast.Ident); ok && id.Name == "rigs" && len(x.Args) == 1 {
				nd.unpriv = true
			}
		case *ast.BinaryExpr:
			for _, a := range []ast.Expr{x.X, x.Y} {
				if w := literal(a); engineWords[w] && nd.picks == "" {
					nd.picks = w
				}
			}
		case *ast.CompositeLit:
			for _, e := range x.Elts {
				if w := literal(e); engineWords[w] && nd.engine == "" {
					nd.engine = fmt.Sprintf("lists %q", w)
				}
			}
		case *ast.SelectorExpr:
			if pkg, ok := x.X.(*ast.Ident); ok && pkg.Name == "ktest" {
				for _, h := range engineHelpers {
					if strings.HasPrefix(x.Sel.Name, h) && nd.engine == "" {
						nd.engine = "uses ktest." + x.Sel.Name
					}
				}
				if x.Sel.Name == "RootlessUser" {
					nd.unpriv = true
				}
				return false
			}
			if s := info.Selections[x]; s != nil {
				nd.refs = append(nd.refs, s.Obj().Pos())
			}
		case *ast.Ident:
			if o := info.Uses[x]; o != nil && o.Pkg() != nil && o.Parent() == o.Pkg().Scope() {
				nd.refs = append(nd.refs, o.Pos())
			}
		}
		return true
	})
	return nd
}

// textCall: a call that builds a path or a text, whose arguments name
// nothing it runs (filepath.Join(dir, "podman", "podman.sock")).
func textCall(c *ast.CallExpr) bool {
	if s, ok := c.Fun.(*ast.SelectorExpr); ok {
		if pkg, ok := s.X.(*ast.Ident); ok {
			switch pkg.Name {
			case "filepath", "path", "fmt", "strings", "errors":
				return true
			}
		}
	}
	return false
}

// intConst is the value of an integer constant expression (a literal or
// a named constant such as landlock.ScopeABI), or 0.
func intConst(e ast.Expr, info *types.Info) int64 {
	var id *ast.Ident
	switch e := e.(type) {
	case *ast.BasicLit:
		if n, err := strconv.ParseInt(e.Value, 0, 64); err == nil {
			return n
		}
		return 0
	case *ast.SelectorExpr:
		id = e.Sel
	case *ast.Ident:
		id = e
	default:
		return 0
	}
	if c, ok := info.Uses[id].(*types.Const); ok {
		if n, ok := constant.Int64Val(constant.ToInt(c.Val())); ok {
			return n
		}
	}
	return 0
}

// literal is a string literal's value, or "".
func literal(e ast.Expr) string {
	if b, ok := e.(*ast.BasicLit); ok && b.Kind == token.STRING {
		if s, err := strconv.Unquote(b.Value); err == nil {
			return s
		}
	}
	return ""
}

// reach walks from the declaration at p through what it reaches: why it
// needs an engine ("" when nothing does; the test itself comparing a
// name with an engine's counts, a helper's comparison does not), whether anything on the way
// runs as the unprivileged user, and the highest Landlock ABI anything
// on the way requires.
func reach(p token.Pos, nodes map[token.Pos]*node) (string, bool, int64) {
	seen := map[token.Pos]bool{}
	unpriv := false
	var abi int64
	var walk func(token.Pos, int) string
	walk = func(p token.Pos, depth int) string {
		nd := nodes[p]
		if nd == nil || seen[p] {
			return ""
		}
		seen[p] = true
		unpriv = unpriv || nd.unpriv
		abi = max(abi, nd.abi)
		if nd.engine != "" {
			return nd.name + " " + nd.engine
		}
		// A test that picks an engine's rig by name needs it; a helper
		// that compares names serves every rig.
		if depth == 0 && nd.picks != "" {
			return fmt.Sprintf("%s picks the %q rig by name", nd.name, nd.picks)
		}
		for _, r := range nd.refs {
			if why := walk(r, depth+1); why != "" {
				return nd.name + " → " + why
			}
		}
		return ""
	}
	return walk(p, 0), unpriv, abi
}
