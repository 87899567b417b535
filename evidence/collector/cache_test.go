package collector

import "testing"

func TestDigestCacheForgetsTheOldest(t *testing.T) {
	var c digestCache[int]
	if _, ok := c.get("a"); ok {
		t.Fatal("an empty cache has nothing")
	}
	c.put("a", 1, 2)
	c.put("b", 2, 2)
	c.put("a", 10, 2) // a replacement is not a new entry
	c.put("c", 3, 2)
	if _, ok := c.get("a"); ok {
		t.Errorf("a is the oldest and must be forgotten past the limit")
	}
	for k, want := range map[string]int{"b": 2, "c": 3} {
		if v, ok := c.get(k); !ok || v != want {
			t.Errorf("%s = %d, %t; want %d", k, v, ok, want)
		}
	}
}
