package reconcile_test

import (
	"context"
	"fmt"
	"os"

	"deathwatch/supervisor/reconcile"
)

// A Go controller reconciles its instance at start-up, removing what a
// run of it that died left behind and it can prove it owns, then lists
// its boxes. The runtimes are those the program links in (a blank
// import of supervisor/runtime/docker, native, ...); here, a fresh
// journal of an instance that has run nothing.
func Example() {
	dir, err := os.MkdirTemp("", "reconcile-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	rep, err := reconcile.Run(ctx, reconcile.Options{Instance: "ci-runner", JournalDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("removed %d, closed %d, blocked %d\n", len(rep.Removed), len(rep.Closed), len(rep.Blocked))

	rows, err := reconcile.List(ctx, reconcile.ListOptions{Instance: "ci-runner", JournalDir: dir,
		Warn: func(err error) { fmt.Println("warning:", err) }})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rows {
		fmt.Println(r.Box, r.Runtime, r.Journal, r.BoxState, r.Owner)
	}
	fmt.Printf("%d boxes\n", len(rows))
	// Output:
	// removed 0, closed 0, blocked 0
	// 0 boxes
}
