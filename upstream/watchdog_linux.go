package upstream

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER (Linux 3.4).
const prSetChildSubreaper = 36

// watchdogSysProcAttr: the watchdog leads a process group of its own (a kill
// of the router's group spares it) and gets SIGHUP when the router dies.
func watchdogSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGHUP}
}

// agentSysProcAttr: the agent leads its own process group and dies with the
// watchdog.
func agentSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// setSubreaper makes the agent's orphans the watchdog's children. Without
// it (a kernel before 3.4) the process group still holds.
func setSubreaper() {
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// children lists the watchdog's children: the agent and the orphans of its
// tree. From /proc/self/task/*/children when the kernel has it
// (CONFIG_PROC_CHILDREN), else from every process's parent in /proc.
func children() []int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return childrenFromStat()
	}
	var pids []int
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		if err != nil {
			return childrenFromStat()
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// childrenFromStat finds the watchdog's children by the parent pid in every
// /proc/PID/stat.
func childrenFromStat() []int {
	self := os.Getpid()
	procs, _ := os.ReadDir("/proc")
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 {
			if ppid, err := strconv.Atoi(f[1]); err == nil && ppid == self {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
