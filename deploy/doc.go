// Package deploy holds checks of the deployment files (Dockerfile, docker-compose.yml) that cannot be run here because no Docker engine exists.
package deploy
