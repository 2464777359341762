package seccomp

// The policy: every syscall a box's agent may make, and what the filter
// answers to the others. It follows Docker's default profile
// (github.com/moby/profiles, seccomp/default.json) as it stands for a
// container without capabilities — the agent never has one — and
// docker_test.go compares the two and names every difference. A call
// this file does not name, and every number past the kernel's table,
// gets ENOSYS: what a kernel without the call answers, so that a C
// library falls back to an older call instead of failing.

// allowed are the calls the agent makes as it likes: Docker's
// unconditional list, ptrace and process_vm_readv/writev (Docker on
// kernels 4.8 and later, where ptrace cannot break out of seccomp),
// and arch_prctl and modify_ldt (Docker's x86_64 additions).
const allowed = `
accept accept4 access alarm arch_prctl bind brk cachestat capget capset chdir chown
clock_getres clock_gettime clock_nanosleep close close_range connect copy_file_range dup
dup2 dup3 epoll_create epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2
epoll_wait epoll_wait_old eventfd eventfd2 execve execveat exit exit_group faccessat
faccessat2 fadvise64 fallocate fanotify_mark fchdir fchown fchownat fcntl fdatasync
fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat fstatfs fsync ftruncate futex
futex_requeue futex_wait futex_waitv futex_wake futimesat get_robust_list get_thread_area
getcpu getcwd getdents getdents64 getegid geteuid getgid getgroups getitimer getpeername
getpgid getpgrp getpid getppid getpriority getrandom getresgid getresuid getrlimit getrusage
getsid getsockname getsockopt gettid gettimeofday getuid getxattr getxattrat
inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel io_destroy
io_getevents io_pgetevents io_setup io_submit ioctl ioprio_get ioprio_set kill
landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown lgetxattr link
linkat listen listmount listxattr listxattrat llistxattr lremovexattr lseek lsetxattr lstat
madvise map_shadow_stack membarrier memfd_create memfd_secret mincore mkdir mkdirat mlock
mlock2 mlockall mmap modify_ldt mprotect mq_getsetattr mq_notify mq_open mq_timedreceive
mq_timedsend mq_unlink mremap mseal msgctl msgget msgrcv msgsnd msync munlock munlockall
munmap name_to_handle_at nanosleep newfstatat pause pidfd_open pidfd_send_signal pipe pipe2
pkey_alloc pkey_free pkey_mprotect poll ppoll prctl pread64 preadv preadv2 prlimit64
process_mrelease process_vm_readv process_vm_writev pselect6 ptrace pwrite64 pwritev
pwritev2 read readahead readlink readlinkat readv recvfrom recvmmsg recvmsg remap_file_pages
removexattr removexattrat rename renameat renameat2 restart_syscall rmdir rseq rt_sigaction
rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait
rt_tgsigqueueinfo sched_get_priority_max sched_get_priority_min sched_getaffinity
sched_getattr sched_getparam sched_getscheduler sched_rr_get_interval sched_setaffinity
sched_setattr sched_setparam sched_setscheduler sched_yield seccomp select semctl semget
semop semtimedop sendfile sendmmsg sendmsg sendto set_robust_list set_thread_area
set_tid_address setfsgid setfsuid setgid setgroups setitimer setpgid setpriority setregid
setresgid setresuid setreuid setrlimit setsid setsockopt setuid setxattr setxattrat shmat
shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 splice stat statfs statmount
statx symlink symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create
timer_delete timer_getoverrun timer_gettime timer_settime timerfd_create timerfd_gettime
timerfd_settime times tkill truncate umask uname unlink unlinkat uretprobe utime utimensat
utimes vfork vmsplice wait4 waitid write writev
`

// refused get EPERM, Docker's answer: calls Docker grants only with a
// capability the agent never has (mbind and the other NUMA policy calls
// need CAP_SYS_NICE there, kcmp CAP_SYS_PTRACE), calls it leaves out
// (the kernel keyring, io_uring, modules, kexec), and adjtimex and
// clock_adjtime, which Docker allows for reading the host's clock.
const refused = `
acct add_key adjtimex bpf clock_adjtime clock_settime create_module delete_module
fanotify_init finit_module get_kernel_syms get_mempolicy init_module io_uring_enter
io_uring_register io_uring_setup ioperm iopl kcmp kexec_file_load kexec_load keyctl
lookup_dcookie lsm_get_self_attr lsm_list_modules lsm_set_self_attr mbind nfsservctl
open_by_handle_at perf_event_open pidfd_getfd process_madvise query_module quotactl
quotactl_fd reboot request_key set_mempolicy set_mempolicy_home_node settimeofday swapoff
swapon _sysctl sysfs syslog uselib userfaultfd ustat vhangup
`

// nested are the calls a nested user namespace needs: refused (EPERM,
// clone and unshare when they make a namespace, clone3 with ENOSYS)
// unless the spec asks for nested user namespaces
// (Options.AllowUserns), when they are allowed as they are.
const nested = `
chroot clone clone3 fsconfig fsmount fsopen fspick mount mount_setattr move_mount
open_tree open_tree_attr pivot_root setdomainname sethostname setns umount2 unshare
`

// checked are the calls allowed or refused by their arguments.
func checked() map[string]rule {
	return map[string]rule{
		// Docker allows every family but AF_ALG and AF_VSOCK; a box uses
		// these four (AF_NETLINK with every protocol, as Docker). A vsock
		// reaches the hypervisor's services on a VM host.
		"socket":     {do: families},
		"socketpair": {do: families},
		// Docker's five personas.
		"personality": {do: personality},
		// No set-id bits from a box: a set-id file left in a folder the host
		// shares would run with the agent's ids for anyone on the host.
		// The kernel keeps them from a mode given at creation too (open,
		// creat, openat with O_CREAT or O_TMPFILE, mknod); openat2's mode
		// sits in memory the filter cannot read, so openat2 is absent
		// (ENOSYS: the C library and Go fall back to openat).
		"chmod":     {do: noSetID, arg: 1},
		"fchmod":    {do: noSetID, arg: 1},
		"fchmodat":  {do: noSetID, arg: 2},
		"fchmodat2": {do: noSetID, arg: 2},
		"mknod":     {do: noSetID, arg: 1},
		"mknodat":   {do: noSetID, arg: 2},
		"creat":     {do: noSetID, arg: 1},
		"open":      {do: noSetIDCreate, flags: 1, arg: 2},
		"openat":    {do: noSetIDCreate, flags: 2, arg: 3},
	}
}

// boxFamilies are the socket families a box may open: AF_UNIX,
// AF_INET, AF_INET6, AF_NETLINK. Any other gets EAFNOSUPPORT, what a
// kernel without that family answers.
var boxFamilies = []uint32{1, 2, 10, 16}

// personas are the personality(2) arguments Docker allows: PER_LINUX,
// PER_LINUX32, UNAME26, PER_LINUX32|UNAME26 and the query 0xffffffff.
var personas = []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// namespaceFlags are the CLONE_NEW* flags Docker's profile refuses in
// clone without CAP_SYS_ADMIN (NEWNS, NEWCGROUP, NEWUTS, NEWIPC,
// NEWUSER, NEWPID, NEWNET); unshare is checked against the same flags.
const namespaceFlags = 0x7e020000
