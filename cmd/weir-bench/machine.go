package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"github.com/weirhq/weir/internal/cli"
)

// machine describes where the run happened.
type machine struct {
	CPU, Cores, Memory, Kernel, Filesystem, Go, Commit, LoadAvgStart string
}

func (m machine) lines() []string {
	return []string{
		"CPU: " + m.CPU + ", " + m.Cores,
		"memory: " + m.Memory,
		"kernel: " + m.Kernel,
		"data filesystem: " + m.Filesystem,
		"Go: " + m.Go,
		"commit: " + m.Commit,
		"load average at start: " + m.LoadAvgStart,
	}
}

func describeMachine(tmp, root string) machine {
	m := machine{CPU: "unknown", Memory: "unknown", Kernel: "unknown", Filesystem: "unknown", Commit: "unknown"}
	// What the servers run with, not the harness: they add spare Ps.
	procs, _ := cli.ServerProcs(os.Getenv("GOMAXPROCS"), runtime.GOMAXPROCS(0))
	m.Cores = fmt.Sprintf("%d logical CPUs (weir serve and weir proxy: GOMAXPROCS %d; the baselines and weir-load %d)",
		runtime.NumCPU(), procs, runtime.GOMAXPROCS(0))
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				if kb, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64); err == nil {
					m.Memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
				}
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("df", "-T", tmp).Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if f := strings.Fields(lines[len(lines)-1]); len(f) >= 7 {
			m.Filesystem = fmt.Sprintf("%s on %s (mounted on %s)", f[1], f[0], f[6])
		}
	}
	if out, err := exec.Command(goTool(), "env", "GOVERSION").Output(); err == nil {
		m.Go = strings.TrimSpace(string(out)) + " " + runtime.GOOS + "/" + runtime.GOARCH
	} else {
		m.Go = runtime.Version()
	}
	if root != "" {
		git := func(args ...string) (string, error) {
			cmd := exec.Command("git", args...)
			cmd.Dir = root
			out, err := cmd.Output()
			return strings.TrimSpace(string(out)), err
		}
		if c, err := git("rev-parse", "--short=12", "HEAD"); err == nil {
			m.Commit = c
			if s, err := git("status", "--porcelain", "--untracked-files=no"); err == nil && s != "" {
				m.Commit += fmt.Sprintf(" + uncommitted changes in %d files", len(strings.Split(s, "\n")))
			}
		}
	}
	m.LoadAvgStart = loadAvg()
	return m
}

// loadAvg is the 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
