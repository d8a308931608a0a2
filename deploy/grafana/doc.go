// Package grafana holds ibex's Grafana dashboard (ibex-dashboard.json:
// import it, pick the Prometheus data source); its tests check that every
// query names only metrics ibex's exporter (metrics/prom) emits.
package grafana
