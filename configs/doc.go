// Package configs holds Ferry's example configuration files (bridge.yaml documents every
// key with its default). It has no code: its tests load every file through the bridge's
// loader and check docker-compose.yml, the Dockerfile and docs/deployment.md against each
// other, the deployment files in deploy/ (Kubernetes manifests, Grafana dashboard) against
// the code, and README.md and docs/ (links, length, the probe's CSV schema).
package configs
