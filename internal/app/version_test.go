package app

import (
	"runtime/debug"
	"testing"
)

// TestVersionPrecedence: a linker-stamped version wins over everything the
// build info says (a build with -buildvcs=false has no revision and said
// "dev"); then the module version, then the VCS revision, then "dev".
func TestVersionPrecedence(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}}
	cases := []struct {
		name, stamped string
		bi            *debug.BuildInfo
		want          string
	}{
		{"stamp over module version", "v1.4.0-3-gabc1234-dirty", &debug.BuildInfo{Main: debug.Module{Version: "v1.3.0"}, Settings: rev}, "v1.4.0-3-gabc1234-dirty"},
		{"stamp without build info", "abc1234", nil, "abc1234"},
		{"stamp without vcs (-buildvcs=false)", "abc1234", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "abc1234"},
		{"blank stamp is no stamp", " \n", &debug.BuildInfo{Main: debug.Module{Version: "v1.3.0"}}, "v1.3.0"},
		{"module version", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.3.0"}, Settings: rev}, "v1.3.0"},
		{"vcs revision", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: rev}, "dev-0123456789ab"},
		{"nothing", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"no build info", "", nil, "dev"},
	}
	for _, c := range cases {
		if got := versionOf(c.stamped, c.bi); got != c.want {
			t.Errorf("%s: versionOf(%q) = %q, want %q", c.name, c.stamped, got, c.want)
		}
	}
}
