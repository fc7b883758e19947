//! What a confined command may not do whatever its uid: no capability (effective, permitted,
//! inheritable, ambient or bounding, so not even a setuid-root binary gets one back), and a
//! seccomp filter refusing the system calls that reach past the turn: mounts, reboot, kexec,
//! kernel modules, swap, the clock, the host name, keyrings, bpf, perf, `io_uring` (which
//! would run calls the filter never sees), new namespaces, and, for a turn that shares the
//! service's pid namespace, `ptrace`. A turn in its own pid namespace may trace its own
//! processes (debuggers, `strace`): the namespace holds nothing else, and Landlock keeps the
//! turn leader out of reach. A turn that shares the service's network may not open UDP, raw,
//! packet or netlink sockets.
//!
//! The filter is built once, in the forkserver before its first fork (building allocates, and
//! every leader would otherwise run the compiler's code afresh), and applied in the child just
//! before `exec` ([`super::sys::harden`]).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Refused with `EPERM`, always.
const REFUSED: &[i64] = &[
    nix::libc::SYS_mount,
    nix::libc::SYS_umount2,
    nix::libc::SYS_pivot_root,
    nix::libc::SYS_chroot,
    nix::libc::SYS_fsopen,
    nix::libc::SYS_fsmount,
    nix::libc::SYS_fsconfig,
    nix::libc::SYS_move_mount,
    nix::libc::SYS_open_tree,
    nix::libc::SYS_mount_setattr,
    nix::libc::SYS_reboot,
    nix::libc::SYS_kexec_load,
    nix::libc::SYS_kexec_file_load,
    nix::libc::SYS_init_module,
    nix::libc::SYS_finit_module,
    nix::libc::SYS_delete_module,
    nix::libc::SYS_swapon,
    nix::libc::SYS_swapoff,
    nix::libc::SYS_sethostname,
    nix::libc::SYS_setdomainname,
    nix::libc::SYS_clock_settime,
    nix::libc::SYS_clock_adjtime,
    nix::libc::SYS_settimeofday,
    nix::libc::SYS_adjtimex,
    nix::libc::SYS_keyctl,
    nix::libc::SYS_add_key,
    nix::libc::SYS_request_key,
    nix::libc::SYS_bpf,
    nix::libc::SYS_perf_event_open,
    nix::libc::SYS_userfaultfd,
    nix::libc::SYS_open_by_handle_at,
    nix::libc::SYS_io_uring_setup,
    nix::libc::SYS_io_uring_enter,
    nix::libc::SYS_io_uring_register,
    nix::libc::SYS_unshare,
    nix::libc::SYS_setns,
    nix::libc::SYS_acct,
    nix::libc::SYS_quotactl,
    nix::libc::SYS_syslog,
];

/// Refused with `EPERM` when the turn shares the service's pid namespace.
const TRACING: &[i64] = &[
    nix::libc::SYS_ptrace,
    nix::libc::SYS_process_vm_readv,
    nix::libc::SYS_process_vm_writev,
];

/// `clone` flags that create namespaces.
const NAMESPACE_FLAGS: &[i32] = &[
    nix::libc::CLONE_NEWNS,
    nix::libc::CLONE_NEWUTS,
    nix::libc::CLONE_NEWIPC,
    nix::libc::CLONE_NEWUSER,
    nix::libc::CLONE_NEWPID,
    nix::libc::CLONE_NEWNET,
    nix::libc::CLONE_NEWCGROUP,
];

/// The socket families and types a command that shares the service's network may not open
/// (Landlock bounds TCP by port; it does not see these): UDP and raw IP sockets, packet and
/// netlink sockets, and Unix sockets by path or abstract name: without a mount namespace of
/// its own a turn could reach another run's socket file, since Landlock does not mediate
/// `connect`. `socketpair` stays allowed (a program's pipes between its own processes).
/// `None`: any type.
const SHARED_NETWORK_SOCKETS: &[(i32, Option<i32>)] = &[
    (nix::libc::AF_INET, Some(nix::libc::SOCK_DGRAM)),
    (nix::libc::AF_INET6, Some(nix::libc::SOCK_DGRAM)),
    (nix::libc::AF_INET, Some(nix::libc::SOCK_RAW)),
    (nix::libc::AF_INET6, Some(nix::libc::SOCK_RAW)),
    (nix::libc::AF_PACKET, None),
    (nix::libc::AF_NETLINK, None),
    (nix::libc::AF_UNIX, None),
];

/// The seccomp filter of a command; `own_namespaces`: it runs in pid and network namespaces
/// of its own. Built on first use and kept: see [`prepare`].
pub fn filter(own_namespaces: bool) -> Result<&'static BpfProgram, seccompiler::Error> {
    static BUILT: [OnceLock<BpfProgram>; 2] = [OnceLock::new(), OnceLock::new()];
    let slot = &BUILT[usize::from(own_namespaces)];
    if let Some(built) = slot.get() {
        return Ok(built);
    }
    let built = chain(build(own_namespaces)?);
    Ok(slot.get_or_init(|| built))
}

/// Builds both filters now, so that the forkserver's leaders inherit them.
pub fn prepare() {
    for own_namespaces in [true, false] {
        let _ = filter(own_namespaces);
    }
}

/// `SECCOMP_RET_ALLOW`, and the instruction classes [`chain`] reads and writes.
const RET_ALLOW: u32 = 0x7fff_0000;
const BPF_RET_K: u16 = 0x06;
const BPF_JMP_JA: u16 = 0x05;

/// One program that runs `programs` in turn: where one would allow the call, the next one
/// decides instead. The kernel runs every loaded filter on every system call, and loading one
/// costs a verification and a compilation, so one filter of two parts is cheaper than two.
/// Each part keeps its length and its (forward, part-relative) jumps; only its `allow`
/// returns become jumps to the next part's first instruction.
fn chain(programs: Vec<BpfProgram>) -> BpfProgram {
    let mut chained: BpfProgram = Vec::new();
    let last = programs.len().saturating_sub(1);
    for (index, program) in programs.into_iter().enumerate() {
        let len = program.len();
        for (at, mut instruction) in program.into_iter().enumerate() {
            if index < last && instruction.code == BPF_RET_K && instruction.k == RET_ALLOW {
                instruction.code = BPF_JMP_JA;
                instruction.k = (len - at - 1) as u32;
            }
            chained.push(instruction);
        }
    }
    chained
}

/// The parts of [`filter`], in the order they run.
fn build(own_namespaces: bool) -> Result<Vec<BpfProgram>, seccompiler::Error> {
    let arch = target_arch()?;
    let mut refused: BTreeMap<i64, Vec<SeccompRule>> = REFUSED
        .iter()
        .chain(if own_namespaces { &[][..] } else { TRACING })
        .map(|&call| (call, Vec::new()))
        .collect();
    if !own_namespaces {
        let sockets = SHARED_NETWORK_SOCKETS
            .iter()
            .map(|&(family, kind)| {
                let mut conditions = vec![SeccompCondition::new(
                    0,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::Eq,
                    family as u64,
                )?];
                if let Some(kind) = kind {
                    // The type's low bits; SOCK_NONBLOCK and SOCK_CLOEXEC ride above them.
                    conditions.push(SeccompCondition::new(
                        1,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::MaskedEq(0xf),
                        kind as u64,
                    )?);
                }
                SeccompRule::new(conditions)
            })
            .collect::<Result<Vec<_>, _>>()?;
        refused.insert(nix::libc::SYS_socket, sockets);
    }
    // `clone` with any namespace flag; its flags are the first argument.
    let with_namespace = NAMESPACE_FLAGS
        .iter()
        .map(|&flag| {
            let flag = flag as u32 as u64;
            SeccompRule::new(vec![SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    refused.insert(nix::libc::SYS_clone, with_namespace);
    let refuse = SeccompFilter::new(
        refused,
        SeccompAction::Allow,
        SeccompAction::Errno(nix::libc::EPERM as u32),
        arch,
    )?;
    // `clone3` passes its flags in memory a filter cannot read: "not implemented" makes the C
    // library fall back to `clone`, whose flags the filter above sees.
    let no_clone3 = SeccompFilter::new(
        BTreeMap::from([(nix::libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(nix::libc::ENOSYS as u32),
        arch,
    )?;
    Ok(vec![refuse.try_into()?, no_clone3.try_into()?])
}

fn target_arch() -> Result<TargetArch, seccompiler::Error> {
    std::env::consts::ARCH
        .try_into()
        .map_err(seccompiler::Error::Backend)
}

/// Drops every capability of this process for good: the bounding set (which bounds what an
/// `exec` can grant, even for uid 0 or a setuid binary), the ambient, inheritable, permitted
/// and effective sets. The bounding set needs `CAP_SETPCAP` to change, which only a privileged
/// service has; an unprivileged one has nothing to drop there. With `run_as`, the process also
/// becomes that uid and gid, with no supplementary group.
pub fn drop_capabilities(run_as: Option<u32>) -> std::io::Result<()> {
    use caps::CapSet;
    let privileged = caps::has_cap(None, CapSet::Effective, caps::Capability::CAP_SETPCAP)
        .map_err(std::io::Error::other)?;
    if privileged {
        caps::clear(None, CapSet::Bounding).map_err(std::io::Error::other)?;
    }
    // After the bounding set (which needs CAP_SETPCAP) and before the other sets (the change
    // needs CAP_SETUID and CAP_SETGID, and clears them itself).
    if let Some(id) = run_as {
        use nix::unistd::{Gid, Uid, setgroups, setresgid, setresuid};
        setgroups(&[])?;
        setresgid(Gid::from_raw(id), Gid::from_raw(id), Gid::from_raw(id))?;
        setresuid(Uid::from_raw(id), Uid::from_raw(id), Uid::from_raw(id))?;
    }
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(std::io::Error::other)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_build_for_this_machine() {
        let own = filter(true).unwrap();
        let shared = filter(false).unwrap();
        assert!(
            shared.len() > own.len(),
            "ptrace and sockets are refused too"
        );
        let parts = build(true).unwrap();
        assert_eq!(own.len(), parts.iter().map(Vec::len).sum::<usize>());
    }

    /// Every `allow` of the first part jumps to the second part's start, which the kernel's
    /// rules require to be forward and inside the program; the last part keeps its returns.
    #[test]
    fn a_chained_filter_passes_what_one_part_allows_to_the_next() {
        let parts = build(true).unwrap();
        let first = parts[0].len();
        let chained = chain(parts.clone());
        let allows = |p: &[seccompiler::sock_filter]| {
            p.iter()
                .filter(|i| i.code == BPF_RET_K && i.k == RET_ALLOW)
                .count()
        };
        assert!(allows(&parts[0]) > 0);
        assert_eq!(allows(&chained[..first]), 0);
        assert_eq!(allows(&chained[first..]), allows(&parts[1]));
        for (at, (was, now)) in parts[0].iter().zip(&chained).enumerate() {
            if was == now {
                continue;
            }
            assert_eq!((was.code, was.k), (BPF_RET_K, RET_ALLOW));
            assert_eq!(now.code, BPF_JMP_JA);
            assert_eq!(at + 1 + now.k as usize, first, "lands on the second part");
        }
        assert_eq!(chained[first..], parts[1][..]);
    }

    /// The chained filter, loaded: each part still answers its own calls (sethostname
    /// `EPERM`, clone3 `ENOSYS`), and what neither refuses runs, forks included.
    #[test]
    fn a_loaded_chained_filter_refuses_what_each_part_refuses() {
        let probe = "import ctypes, os\n\
            libc = ctypes.CDLL(None, use_errno=True)\n\
            libc.sethostname(b'x', 1); print(ctypes.get_errno())\n\
            libc.syscall(435, None, 0); print(ctypes.get_errno())\n\
            pid = os.fork()\n\
            os._exit(0) if pid == 0 else print(os.waitpid(pid, 0)[1])\n";
        let mut command = std::process::Command::new("python3");
        command.args(["-c", probe]);
        crate::sys::harden(&mut command, filter(true).unwrap(), None);
        let out = command.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let errno = |e: nix::errno::Errno| (e as i32).to_string();
        let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(
            lines,
            [
                errno(nix::errno::Errno::EPERM),
                errno(nix::errno::Errno::ENOSYS),
                "0".to_owned()
            ]
        );
    }
}
