package runtimeproxy

// RunKind is what a forwarded RunPodSandbox proves of the attempt's
// sandbox.
type RunKind int

// The kinds of RunOutcome. The zero value is RunMaybeCreated, the one that
// claims least: a pending record is kept until a listing settles it.
const (
	// RunMaybeCreated: a sandbox may exist under an id not known: no
	// answer came back (the deadline passed, the call was cancelled, the
	// connection broke under it), or the runtime succeeded with an answer
	// that names no sandbox.
	RunMaybeCreated RunKind = iota
	// RunCreated: the runtime created the sandbox it names.
	RunCreated
	// RunReserved: the runtime refused the call because a sandbox it names
	// holds the attempt's name (an earlier call created it, or is
	// creating it, and its answer was lost).
	RunReserved
	// RunNotCreated: the runtime's answer says for certain that no sandbox
	// was created (it answered with an error, or the call never got onto
	// a connection).
	RunNotCreated
)

func (k RunKind) String() string {
	switch k {
	case RunCreated:
		return "created"
	case RunReserved:
		return "reserved"
	case RunNotCreated:
		return "not-created"
	default:
		return "maybe-created"
	}
}

// RunOutcome is the outcome of one forwarded RunPodSandbox, classified
// once where the runtime's answer is read: its kind, the sandbox it names
// (created, or holding the attempt's name) and the error the kubelet gets
// unchanged. Build it with Created, Reserved, NotCreated or MaybeCreated.
type RunOutcome struct {
	kind RunKind
	id   string
	err  error
}

// Created is a success that names sandbox id; an empty id names none, and
// is a RunMaybeCreated success (the sandbox exists, its id is not known).
func Created(id string) RunOutcome {
	if id == "" {
		return RunOutcome{kind: RunMaybeCreated}
	}
	return RunOutcome{kind: RunCreated, id: id}
}

// Reserved is the runtime's refusal err, which says sandbox id holds the
// attempt's name; with no id it is a RunMaybeCreated failure.
func Reserved(id string, err error) RunOutcome {
	if id == "" {
		return MaybeCreated(err)
	}
	return RunOutcome{kind: RunReserved, id: id, err: err}
}

// NotCreated is a failure err that proves no sandbox was created.
func NotCreated(err error) RunOutcome { return RunOutcome{kind: RunNotCreated, err: err} }

// MaybeCreated is a failure err after which a sandbox may exist (nil: a
// success whose answer names no sandbox).
func MaybeCreated(err error) RunOutcome { return RunOutcome{kind: RunMaybeCreated, err: err} }

// Kind is what the outcome proves of the attempt's sandbox.
func (o RunOutcome) Kind() RunKind { return o.kind }

// SandboxID is the sandbox created (RunCreated) or holding the attempt's
// name (RunReserved); empty otherwise.
func (o RunOutcome) SandboxID() string { return o.id }

// Err is the runtime's error, returned to the kubelet unchanged; nil for a
// success.
func (o RunOutcome) Err() error { return o.err }
