// Package member reaches member clusters from the hub: a REST config from a FleetCluster's
// kubeconfig Secret (refusing what could make the controller read its own files or run programs),
// read again only when the Secret's resourceVersion changes, and one rate-limited client per member.
package member
