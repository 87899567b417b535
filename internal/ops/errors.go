// Package ops is what tidegate's entry paths do to the hub: the command line (tidegate and the
// flux fleet plugin) and the MCP server (tidegate mcp) are two front ends of it. A write is a
// Mutation of one FleetRollout's spec or annotations, applied as a merge patch (Apply) that returns
// a Job whose status can be followed until the rollout settles (Follow); every failure is an
// *Error with a stable Code and the object it concerns, so automation never parses prose.
package ops

import (
	"errors"
	"fmt"
	"net"
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// Code is the stable, machine-readable kind of an Error.
type Code string

const (
	// CodeNotFound: the object does not exist.
	CodeNotFound Code = "NotFound"
	// CodeForbidden: Kubernetes RBAC denied the caller (the identity of the kubeconfig in use).
	CodeForbidden Code = "Forbidden"
	// CodeInvalid: the request itself is wrong (a missing or unknown argument); the message names the fix.
	CodeInvalid Code = "Invalid"
	// CodeRefused: the API server refused the change (validation or admission); nothing was written.
	CodeRefused Code = "Refused"
	// CodeConflict: the object changed while it was being written, more often than retried.
	CodeConflict Code = "Conflict"
	// CodeAPINotServed: the cluster does not serve the kind (the CRDs are not installed).
	CodeAPINotServed Code = "APINotServed"
	// CodeUnavailable: the API server could not be reached or did not answer.
	CodeUnavailable Code = "Unavailable"
	// CodeTimeout: what was waited for did not happen in time; the operation may still settle.
	CodeTimeout Code = "Timeout"
	// CodeCannotCancel: a job cannot be cancelled the way asked; the message says why.
	CodeCannotCancel Code = "CannotCancel"
	// CodeWritesDisabled: a write was asked of a read-only front end (tidegate mcp without --allow-writes).
	CodeWritesDisabled Code = "WritesDisabled"
	// CodeUnmet: the answer is no (the command line's exit code 1): what was asked for does not hold.
	CodeUnmet Code = "Unmet"
	// CodeInternal: anything else; the message is the underlying error.
	CodeInternal Code = "Internal"
)

// Ref names the object an Error or a Job concerns.
type Ref struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

func (r Ref) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// RolloutRef is the Ref of FleetRollout ns/name.
func RolloutRef(ns, name string) Ref { return Ref{Kind: "fleetrollout", Namespace: ns, Name: name} }

// Error is a failure with a stable code, a message that says what went wrong and what to do, and
// the object it concerns. It marshals to JSON as the front ends print it.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	Object  *Ref   `json:"object,omitempty"`
	err     error
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.err }

// Errorf is an Error of code about obj (nil for none).
func Errorf(code Code, obj *Ref, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Code: code, Message: err.Error(), Object: obj, err: errors.Unwrap(err)}
}

// NewError is an Error of code about obj (nil for none) with message, caused by cause (nil for none).
func NewError(code Code, obj *Ref, message string, cause error) *Error {
	return &Error{Code: code, Message: message, Object: obj, err: cause}
}

// CodeOf classifies err: an *Error's own code, else an API error's by its status, else CodeInternal.
func CodeOf(err error) Code {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Code
	case apierrors.IsNotFound(err):
		return CodeNotFound
	case meta.IsNoMatchError(err):
		return CodeAPINotServed
	case apierrors.IsForbidden(err):
		return CodeForbidden
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return CodeRefused
	case apierrors.IsConflict(err):
		return CodeConflict
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsServiceUnavailable(err), apierrors.IsTooManyRequests(err), isConnection(err):
		return CodeUnavailable
	}
	return CodeInternal
}

// AsError returns err as an *Error: itself when it is one, else an API error classified by its
// status (CodeOf), about obj. nil stays nil.
func AsError(err error, obj Ref) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	code := CodeOf(err)
	return &Error{Code: code, Message: Describe(code, obj.String(), err), Object: &obj, err: err}
}

// Describe is the message of an error err of code about what (e.g. "fleetrollout fleet/web").
func Describe(code Code, what string, err error) string {
	switch code {
	case CodeNotFound:
		return what + " not found"
	case CodeAPINotServed:
		return fmt.Sprintf("%s: the API is not served by this cluster (are the tidegate and Flux CRDs installed?): %v", what, err)
	case CodeForbidden:
		return fmt.Sprintf("%s: forbidden: %v", what, err)
	case CodeRefused:
		return fmt.Sprintf("%s: the API server refused the change: %v", what, err)
	}
	return fmt.Sprintf("%s: %v", what, err)
}

// isConnection tells an error that never got an answer from the API server (refused, reset, a
// transport timeout, DNS): client-go returns those as *url.Error around a net error.
func isConnection(err error) bool {
	var ue *url.Error
	var ne net.Error
	return errors.As(err, &ue) || errors.As(err, &ne) || utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err)
}
