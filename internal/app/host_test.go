package app

import (
	"errors"
	"testing"
)

// TestReceivedPathHost: the name appended to ReceivedPath is found as in
// the reference system: DOCKER_HOST_HOSTNAME, then DOCKER_HOST_IP, then
// the host name; the node name when there is none.
func TestReceivedPathHost(t *testing.T) {
	host := func() (string, error) { return "container-1a2b", nil }
	noHost := func() (string, error) { return "", errors.New("no host name") }
	cases := []struct {
		name     string
		env      map[string]string
		hostname func() (string, error)
		want     string
	}{
		{"host name", nil, host, "container-1a2b"},
		{"docker host name first", map[string]string{"DOCKER_HOST_HOSTNAME": "docker-host.example", "DOCKER_HOST_IP": "10.0.0.7"}, host, "docker-host.example"},
		{"docker host ip", map[string]string{"DOCKER_HOST_IP": "10.0.0.7"}, host, "10.0.0.7"},
		{"blank is unset", map[string]string{"DOCKER_HOST_HOSTNAME": " ", "DOCKER_HOST_IP": ""}, host, "container-1a2b"},
		{"values trimmed", map[string]string{"DOCKER_HOST_HOSTNAME": " docker-host.example\n"}, host, "docker-host.example"},
		{"node when no host name", nil, noHost, "node-1"},
	}
	for _, c := range cases {
		getenv := func(k string) string { return c.env[k] }
		if got := receivedPathHost(getenv, c.hostname, "node-1"); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
