//go:build linux

package sandbox

// The helper: the router's own executable re-run with helperArg (as the
// agent watchdog is, upstream/watchdog.go), started in a new mount
// namespace (and a new user namespace when the router is not root, so that
// it may mount there). It masks the plan's hidden paths, restricts writes
// with Landlock, sets no_new_privs and execs the agent: the agent's first
// instruction already runs confined, and so does everything it starts.
//
// Why each piece holds:
//   - The masks are mounts in a private mount namespace: the router and the
//     rest of the machine see nothing. A masked path reads as an empty file
//     or directory and is read-only (EROFS); a symlink to it, or a path
//     through "..", resolves to the mask; a new hard link to it fails with
//     EXDEV (the mask is another file system).
//   - Landlock forbids any mount, umount or pivot_root to a confined
//     process, so the masks cannot be removed, and a new user or mount
//     namespace created inside changes nothing. Its domain is inherited by
//     every descendant (fork, setsid, daemons, double forks) and cannot be
//     dropped. It also denies ptrace, and /proc/PID/root, /proc/PID/fd, of
//     any process outside the domain, such as the router.
//   - no_new_privs: no setuid program or file capability raises privileges.
//   - As root, the capabilities that would reach a file without its path
//     (CAP_DAC_READ_SEARCH: open_by_handle_at), raw devices or modules are
//     dropped from the bounding set. Without root, the user namespace's
//     capabilities end at the agent's exec.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// helperArg, as the first argument, runs the executable as the sandbox
// helper. Versioned like the watchdog's: a router upgraded in place must
// not run a helper that reads another plan format.
const helperArg = "__acp-router-sandbox-v1"

// planEnv carries the plan (JSON) to the helper, which removes it from the
// agent's environment.
const planEnv = "ACP_ROUTER_SANDBOX_PLAN"

// MinLandlockABI is the oldest Landlock ABI that can hold a profile: 3
// restricts truncate(2) too (Linux 6.2).
const MinLandlockABI = 3

var hooked atomic.Bool

// RunIfRequested runs this process as the sandbox helper, and never
// returns, when the router started it as one; otherwise it returns at
// once, and this executable can confine agents from then on. Call it first
// in main (and in TestMain of tests that confine processes).
func RunIfRequested() {
	if len(os.Args) > 1 && os.Args[1] == terminalArg {
		os.Exit(runTerminal(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == helperArg {
		err := runHelper(os.Args[2:])
		fmt.Fprintf(os.Stderr, "acp-router sandbox: %v\n", err)
		os.Exit(126)
	}
	hooked.Store(true)
}

var (
	availOnce sync.Once
	availErr  error
)

// Available says whether this kernel and process can apply a profile:
// nil, or an error saying what is missing and how to fix it.
func Available() error {
	availOnce.Do(func() { availErr = available() })
	return availErr
}

func available() error {
	if !hooked.Load() {
		return errors.New("this executable cannot run the sandbox helper (its main does not call sandbox.RunIfRequested)")
	}
	abi, err := llsys.LandlockGetABIVersion()
	switch {
	case err != nil:
		return fmt.Errorf("no Landlock (%v): the sandbox needs Linux 6.2 or later with Landlock enabled (CONFIG_SECURITY_LANDLOCK=y and \"landlock\" in the lsm= boot parameter)", err)
	case abi < MinLandlockABI:
		return fmt.Errorf("this kernel's Landlock ABI is %d; the sandbox needs %d or later (Linux 6.2+): upgrade the kernel", abi, MinLandlockABI)
	}
	if os.Geteuid() == 0 {
		return nil
	}
	for _, c := range []struct{ file, bad, fix string }{
		{"/proc/sys/user/max_user_namespaces", "0", "sysctl -w user.max_user_namespaces=15000"},
		{"/proc/sys/kernel/unprivileged_userns_clone", "0", "sysctl -w kernel.unprivileged_userns_clone=1"},
		{"/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1", "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile for acp-router that allows userns"},
	} {
		if b, err := os.ReadFile(c.file); err == nil && strings.TrimSpace(string(b)) == c.bad {
			return fmt.Errorf("unprivileged user namespaces are disabled (%s is %s): fix with %s", c.file, c.bad, c.fix)
		}
	}
	return nil
}

// helperExecutable is what is re-run as the helper: the running
// executable itself, even when its file was replaced since.
func helperExecutable() (string, error) {
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		return "/proc/self/exe", nil
	}
	return os.Executable()
}

// Wrap makes cmd run under the plan: the helper is run instead, with the
// plan in its environment, and execs cmd's program. cmd.Path must be
// resolved (exec.Command did it). Namespaces must be set on whatever
// finally starts it (Namespaces).
func (pl *Plan) Wrap(cmd *exec.Cmd) error {
	exe, err := helperExecutable()
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	b, err := json.Marshal(pl)
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	args := append([]string{os.Args[0], helperArg, cmd.Path}, cmd.Args...)
	cmd.Path, cmd.Args = exe, args
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, planEnv+"=") })
	cmd.Env = append(env, planEnv+"="+string(b))
	Namespaces(cmd.Env, cmd)
	return nil
}

// Namespaces adds to cmd's SysProcAttr the namespaces the helper needs,
// when env carries a plan (the agent watchdog starts the helper with the
// environment Wrap built). The clone happens in the child before exec: a Go
// process cannot enter a user namespace once it runs threads.
func Namespaces(env []string, cmd *exec.Cmd) {
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, planEnv+"=") }) {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	a := cmd.SysProcAttr
	a.Cloneflags |= syscall.CLONE_NEWNS
	net := planNet(env)
	if net {
		a.Cloneflags |= syscall.CLONE_NEWNET
	}
	if os.Geteuid() != 0 {
		uid, gid := os.Geteuid(), os.Getegid()
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		a.GidMappingsEnableSetgroups = false
		// The helper keeps CAP_SYS_ADMIN of its own namespace across its
		// exec to mount the masks; it clears it before the agent's.
		a.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
		if net {
			a.AmbientCaps = append(a.AmbientCaps, unix.CAP_NET_ADMIN) // loopback up
		}
	}
}

// rootDrops are the capabilities a root agent loses: each reaches files
// without their path or the machine beneath the file system.
var rootDrops = []uintptr{unix.CAP_DAC_READ_SEARCH, unix.CAP_SYS_ADMIN, unix.CAP_SYS_MODULE, unix.CAP_SYS_RAWIO,
	unix.CAP_SYS_PTRACE, unix.CAP_MKNOD, unix.CAP_SYS_BOOT, unix.CAP_BPF, unix.CAP_SYS_CHROOT, unix.CAP_SETPCAP}

// runHelper applies the plan in its environment and execs args[0] with
// argv args[1:]. It returns only on failure.
func runHelper(args []string) error {
	if len(args) < 2 {
		return errors.New("the helper runs only when the router starts it")
	}
	entered, err := Enter()
	if err != nil {
		return err
	}
	if !entered {
		return errors.New("the helper runs only when the router starts it")
	}
	if forwarder != nil {
		return runForwarding(args)
	}
	if err := syscall.Exec(args[0], args[1:], os.Environ()); err != nil {
		return fmt.Errorf("exec %s: %w", args[0], err)
	}
	return nil
}

// Handoff makes cmd, a process of this executable that calls Enter before
// it starts the agent (the agent watchdog, upstream/watchdog.go), confine
// itself by the plan: it starts in the namespaces the plan needs, with the
// plan in its environment. The agent it then starts inherits all of it,
// without a second start of this executable (the helper's cost).
func (pl *Plan) Handoff(cmd *exec.Cmd) error {
	b, err := json.Marshal(pl)
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, planEnv+"=") })
	cmd.Env = append(env, planEnv+"="+string(b))
	Namespaces(cmd.Env, cmd)
	return nil
}

// Enter applies the plan handed to this process (Wrap, Handoff), if any,
// to itself and to every process it starts from then on: masks, Landlock,
// no_new_privs, capabilities. It reports whether there was a plan; the
// plan's variable is removed from the environment.
func Enter() (bool, error) {
	raw, ok := os.LookupEnv(planEnv)
	if !ok {
		return false, nil
	}
	os.Unsetenv(planEnv)
	var pl Plan
	if err := json.Unmarshal([]byte(raw), &pl); err != nil {
		return true, fmt.Errorf("sandbox plan: %v", err)
	}
	if err := pl.mountMasks(); err != nil {
		return true, err
	}
	if err := pl.enterNet(); err != nil {
		return true, err
	}
	if err := pl.landlock(); err != nil {
		return true, err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return true, fmt.Errorf("no_new_privs: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return true, fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if os.Geteuid() == 0 {
		drops := rootDrops
		if pl.Net != nil {
			// Root's CAP_NET_ADMIN reaches the host's namespace too (a
			// veth whose peer is created there).
			drops = append(slices.Clone(rootDrops), unix.CAP_NET_ADMIN)
		}
		for _, c := range drops {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
				return true, fmt.Errorf("drop capability %d: %w", c, err)
			}
		}
	}
	return true, nil
}

// mountMasks makes the mounts private and masks every hidden path: files
// with an empty read-only file, directories with an empty read-only tmpfs.
func (pl *Plan) mountMasks() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	const ro = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	for _, d := range pl.HideDirs {
		if err := unix.Mount("tmpfs", d, "tmpfs", ro, "size=4k,nr_inodes=1,mode=0555"); err != nil {
			return fmt.Errorf("hide %s: %w", d, err)
		}
	}
	if len(pl.HideFiles) == 0 {
		return nil
	}
	// The empty file lives on a tmpfs of this namespace, staged in a
	// directory of the shared /tmp that is removed once the masks are
	// bound (they keep the tmpfs alive).
	stage, err := os.MkdirTemp("", "acp-router-sandbox-")
	if err != nil {
		return fmt.Errorf("stage the masks: %w", err)
	}
	defer os.Remove(stage)
	if err := unix.Mount("tmpfs", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=4,mode=0755"); err != nil {
		return fmt.Errorf("stage the masks: %w", err)
	}
	defer unix.Unmount(stage, unix.MNT_DETACH)
	empty := stage + "/empty"
	if err := os.WriteFile(empty, nil, 0o444); err != nil {
		return fmt.Errorf("stage the masks: %w", err)
	}
	for _, f := range pl.HideFiles {
		if err := unix.Mount(empty, f, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("hide %s: %w", f, err)
		}
		if err := unix.Mount("", f, "", unix.MS_BIND|unix.MS_REMOUNT|ro, ""); err != nil {
			return fmt.Errorf("hide %s: %w", f, err)
		}
	}
	return nil
}

// landlock allows reading and executing everywhere and writing only in the
// writable set. The rights that create device nodes are never granted.
func (pl *Plan) landlock() error {
	rw := landlock.AccessFSSet(llsys.AccessFSWriteFile | llsys.AccessFSReadFile | llsys.AccessFSReadDir | llsys.AccessFSExecute |
		llsys.AccessFSRemoveDir | llsys.AccessFSRemoveFile | llsys.AccessFSMakeDir | llsys.AccessFSMakeReg |
		llsys.AccessFSMakeSock | llsys.AccessFSMakeFifo | llsys.AccessFSMakeSym | llsys.AccessFSTruncate | llsys.AccessFSRefer)
	rules := []landlock.Rule{landlock.RODirs("/")}
	var devs, files, dirs, devDirs []string
	for _, f := range pl.WritableFiles {
		if strings.HasPrefix(f, "/dev/") {
			devs = append(devs, f)
		} else {
			files = append(files, f)
		}
	}
	// /dev/pts holds the pseudo-terminals: a terminal is useless without
	// its ioctls (tcsetattr, TIOCSCTTY), which Landlock refuses on a
	// device unless the rule that opens it grants them.
	for _, d := range pl.WritableDirs {
		if strings.HasPrefix(d, "/dev/") {
			devDirs = append(devDirs, d)
		} else {
			dirs = append(dirs, d)
		}
	}
	if len(dirs) > 0 {
		rules = append(rules, landlock.PathAccess(rw, dirs...))
	}
	if len(devDirs) > 0 {
		rules = append(rules, landlock.PathAccess(rw|llsys.AccessFSIoctlDev, devDirs...))
	}
	if len(files) > 0 {
		rules = append(rules, landlock.RWFiles(files...))
	}
	if len(devs) > 0 {
		rules = append(rules, landlock.RWFiles(devs...).WithIoctlDev())
	}
	if err := landlock.V5.BestEffort().RestrictPaths(rules...); err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	return nil
}
