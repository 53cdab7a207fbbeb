// Package configs holds Ferry's example configuration files (bridge.yaml documents every
// key with its default). It has no code: its tests load every file through the bridge's
// loader and check docker-compose.yml, the Dockerfile and README.md against each other,
// and the deployment files in deploy/ (Kubernetes manifests, Grafana dashboard) against
// the code.
package configs
