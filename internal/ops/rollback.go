package ops

import (
	"fmt"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/verdict"
)

// RollbackChecks says how the policy's checks went at the known-good after a rollback
// (status.rollback.checks, unchecked): "" when none ran or there is no rollback.
func RollbackChecks(rb *v1alpha1.RollbackStatus) string {
	if rb == nil || len(rb.Checks) == 0 && len(rb.Unchecked) == 0 {
		return ""
	}
	var passed int
	var failed []string
	for _, c := range rb.Checks {
		if c.Result == verdict.CheckFailed {
			failed = append(failed, c.Cluster+" ("+c.Check+")")
		} else {
			passed++
		}
	}
	msg := fmt.Sprintf("checks at %s: %d passed", rb.To, passed)
	if len(failed) > 0 {
		msg += fmt.Sprintf(", %d failed: %s", len(failed), engine.FirstNames(failed, 5))
	}
	if n := len(rb.Unchecked); n > 0 {
		msg += fmt.Sprintf(", %d not finished by the deadline: %s", n, engine.FirstNames(rb.Unchecked, 3))
	}
	return msg + " (status.rollback.checks)"
}
