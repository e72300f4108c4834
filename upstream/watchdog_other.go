//go:build unix && !linux

package upstream

import "syscall"

// Outside Linux there is no parent-death signal and no subreaper: the
// lifeline and the agent's process group hold (see watchdog.go).

func watchdogSysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func agentSysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func setSubreaper() {}

// children: without a subreaper no orphan of the agent's tree becomes the
// watchdog's child; only the agent itself is, and its group is signalled.
func children() []int { return nil }
