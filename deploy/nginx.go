package deploy

import _ "embed" // NginxConf

// NginxConf is nginx/nginx.conf, the gateway docker-compose.yml runs in front of the instances,
// for the programs that run its rules on this machine: the drill's I11 row starts a private
// nginx from it, with its own listen address, upstreams and log files.
//
//go:embed nginx/nginx.conf
var NginxConf string
