// Package deploy holds ibexd's systemd unit and Kubernetes manifests; its
// tests check them.
package deploy
