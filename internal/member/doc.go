// Package member reaches member clusters from the hub: a REST config from a FleetCluster's
// kubeconfig Secret (refusing what could make the controller read its own files or run programs),
// and a cache of one client per member, rebuilt when its kubeconfig changes.
package member
