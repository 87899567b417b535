package preflight

import (
	"regexp"
	"strings"
	"unicode/utf8"

	"k8s.io/client-go/rest"
)

// redactor takes credentials out of messages: the config's token and password wherever they
// appear, a bearer token after "Bearer", and the user information of URLs.
type redactor struct {
	secrets []string
}

var (
	bearer   = regexp.MustCompile(`(?i)(bearer\s+)[^\s"',;]+`)
	userInfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]+@`)
	spaces   = regexp.MustCompile(`\s+`)
)

func newRedactor(cfg *rest.Config) *redactor {
	r := &redactor{}
	for _, s := range []string{cfg.BearerToken, cfg.Password} {
		if s != "" {
			r.secrets = append(r.secrets, s)
		}
	}
	return r
}

// clean returns msg on one line, without credentials, at most maxMessage bytes long.
func (r *redactor) clean(msg string) string {
	for _, s := range r.secrets {
		msg = strings.ReplaceAll(msg, s, "[redacted]")
	}
	msg = bearer.ReplaceAllString(msg, "${1}[redacted]")
	msg = userInfo.ReplaceAllString(msg, "${1}")
	msg = strings.TrimSpace(spaces.ReplaceAllString(msg, " "))
	if len(msg) > maxMessage {
		cut := maxMessage
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + " …"
	}
	return msg
}
