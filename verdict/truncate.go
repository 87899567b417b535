package verdict

import "unicode/utf8"

// Truncate cuts s to at most max bytes, on a character boundary, marking the cut with "…", so that
// a message quoting a whole value stays bounded.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const mark = "…"
	cut := max - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
