package supervisor

import (
	"context"
	"errors"
	"sync"
	"time"

	"deathwatch/shared"
)

// memRuntime is an in-memory runtime for the lifecycle's unit tests.
type memRuntime struct {
	mu      sync.Mutex
	boxes   map[string]Listed
	removed []string
}

func (m *memRuntime) Name() string { return "memrt" }
func (m *memRuntime) Probe(context.Context) (Info, error) {
	return Info{Runtime: "memrt", Present: true}, nil
}
func (m *memRuntime) Create(context.Context, *Box) error            { return nil }
func (m *memRuntime) Start(context.Context, *Box) (*Started, error) { return nil, errors.New("no") }
func (m *memRuntime) Remove(_ context.Context, b *Box) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.boxes, b.Name)
	m.removed = append(m.removed, b.Name)
	return nil
}
func (m *memRuntime) Exists(_ context.Context, b *Box) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.boxes[b.Name]
	return ok, nil
}
func (m *memRuntime) HostPID(context.Context, *Box) (int, error) { return 0, nil }
func (m *memRuntime) List(_ context.Context, instance string) ([]Listed, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Listed
	for _, b := range m.boxes {
		if b.Labels[shared.LabelInstance] == instance {
			out = append(out, b)
		}
	}
	return out, nil
}

var theMem = &memRuntime{boxes: map[string]Listed{}}

func init() {
	Register(Descriptor{Name: "memrt", Bounds: Bounds{Dead: time.Second, Removed: time.Second}, New: func(RuntimeConfig) (Runtime, error) { return theMem, nil }})
}
