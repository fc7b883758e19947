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
//! The filters are built before the command is forked (building allocates) and applied in the
//! child just before `exec` ([`super::sys::harden`]).

use std::collections::BTreeMap;

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

/// The seccomp filters of a command; `own_namespaces`: it runs in pid and network namespaces
/// of its own.
pub fn filters(own_namespaces: bool) -> Result<Vec<BpfProgram>, seccompiler::Error> {
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
    #[test]
    fn the_filters_build_for_this_machine() {
        let filters = super::filters(true).unwrap();
        assert_eq!(filters.len(), 2);
        let shared = super::filters(false).unwrap();
        assert!(
            shared[0].len() > filters[0].len(),
            "ptrace and sockets are refused too"
        );
    }
}
