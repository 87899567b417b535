package evidence

import (
	"sync"
	"time"
)

// MemberDeadline is the deadline each of n members gets when parallel of them are asked at once
// within budget: the budget shared by the rounds, at most limit. A member that uses up its deadline
// then holds up no other member beyond its own round, and the last round ends within budget.
func MemberDeadline(n, parallel int, budget, limit time.Duration) time.Duration {
	if n <= 0 || parallel <= 0 || budget <= 0 {
		return limit
	}
	rounds := (n + parallel - 1) / parallel
	return min(limit, budget/time.Duration(rounds))
}

// Each runs fn(0) … fn(n-1), at most parallel at once (all at once when parallel <= 0), and returns
// when every call has returned.
func Each(n, parallel int, fn func(i int)) {
	if parallel <= 0 {
		parallel = n
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(parallel, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
