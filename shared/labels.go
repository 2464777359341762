package shared

// Label keys put on every box the supervisor creates. Reconcile removes
// a box only when these match a journal entry of its instance.
const (
	LabelPrefix   = "io.deathwatch."
	LabelManaged  = LabelPrefix + "managed"   // always "true"
	LabelInstance = LabelPrefix + "instance"  // the controller instance
	LabelRunKey   = LabelPrefix + "run-key"   // the controller's run
	LabelLaunchID = LabelPrefix + "launch-id" // this launch
	LabelNonce    = LabelPrefix + "nonce"     // random, journaled before create
)
