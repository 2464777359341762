// Package instance names the instances the supervisor's own launches
// run under, beside the controller's: the staging probe's and
// prove-deathwatch's.
package instance

// Probe is the instance of the staging probe's box: doctor's, and the
// one exec's --stage bind|auto launches.
func Probe(instance string) string { return instance + ".doctor" }

// Prove is the instance prove-deathwatch's trials run under.
func Prove(instance string) string { return instance + ".prove" }
