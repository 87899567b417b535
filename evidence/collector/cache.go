package collector

import "sync"

// digestCache keeps values computed from content addressed by digest (a rendered package, a
// compiled policy): the content behind a digest never changes, so each is computed once, not once per
// reconcile. Its zero value is empty and ready; put forgets the oldest entries past a limit.
type digestCache[V any] struct {
	mu      sync.Mutex
	entries map[string]V
	order   []string
}

func (c *digestCache[V]) get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.entries[key]
	return v, ok
}

// put keeps v under key and forgets the oldest entries beyond limit.
func (c *digestCache[V]) put(key string, v V, limit int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]V{}
	}
	if _, ok := c.entries[key]; !ok {
		c.order = append(c.order, key)
	}
	c.entries[key] = v
	for len(c.order) > limit {
		delete(c.entries, c.order[0])
		c.order = c.order[1:]
	}
}
