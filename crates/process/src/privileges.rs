//! What a confined command may not do whatever its uid: no capability (effective, permitted,
//! inheritable, ambient or bounding, so not even a setuid-root binary gets one back), and a
//! seccomp filter refusing the system calls that reach past the turn: mounts, reboot, kexec,
//! kernel modules, swap, the clock, the host name, keyrings, bpf, perf, `io_uring` (which
//! would run calls the filter never sees), new namespaces, and, for a turn that shares the
//! service's pid namespace, `ptrace`. A turn in its own pid namespace may trace its own
//! processes (debuggers, `strace`): the namespace holds nothing else, and Landlock keeps the
//! turn leader out of reach. A turn that shares the service's network may not open UDP, raw,
//! packet or netlink sockets. On x86-64, calls of the x32 ABI are "not implemented".
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
    let (parts, calls) = build(own_namespaces)?;
    let full = chain(parts);
    let built = shortcut(&calls, &full).unwrap_or(full);
    Ok(slot.get_or_init(|| built))
}

/// Builds both filters now, so that the forkserver's leaders inherit them.
pub fn prepare() {
    for own_namespaces in [true, false] {
        let _ = filter(own_namespaces);
    }
}

/// The filter's returns, and the instructions [`chain`] and [`shortcut`] read and write.
const RET_ALLOW: u32 = nix::libc::SECCOMP_RET_ALLOW;
const RET_ERRNO: u32 = nix::libc::SECCOMP_RET_ERRNO;
const BPF_RET_K: u16 = (nix::libc::BPF_RET | nix::libc::BPF_K) as u16;
const BPF_JMP_JA: u16 = (nix::libc::BPF_JMP | nix::libc::BPF_JA) as u16;
const BPF_LD_W_ABS: u16 = (nix::libc::BPF_LD | nix::libc::BPF_W | nix::libc::BPF_ABS) as u16;
const BPF_JMP_JEQ_K: u16 = (nix::libc::BPF_JMP | nix::libc::BPF_JEQ | nix::libc::BPF_K) as u16;
const BPF_JMP_JGE_K: u16 = (nix::libc::BPF_JMP | nix::libc::BPF_JGE | nix::libc::BPF_K) as u16;

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

/// Where `struct seccomp_data` holds the call's number and its architecture.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;
/// On x86-64, the bit that marks a call of the x32 ABI.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// A jump of [`shortcut`]'s, before the offsets are known.
#[derive(Clone, Copy)]
enum To {
    Next,
    At(usize),
    /// The `allow` after the search.
    Allow,
    /// The full program's first instruction.
    Full,
}

/// `full` behind a binary search over the call numbers it names (`calls`): any other call of
/// this machine's architecture is allowed at once; a named one, and every call of another
/// architecture, go on to `full`, which decides as before. The kernel runs a new filter over
/// every call number when it is loaded (to learn which it may allow without running it
/// again), and `full` tests its calls one after the other: about 150 instructions for each
/// of 900 numbers, on every turn's start. On x86-64, a call of the x32 ABI (`full` compares
/// numbers without its bit) is answered "not implemented", as on a kernel built without it.
/// `None` when a jump would not fit in its 8 bits (a list of many more calls): `full` alone
/// is the filter then.
fn shortcut(calls: &[i64], full: &BpfProgram) -> Option<BpfProgram> {
    let arch = audit_arch()?;
    let mut calls: Vec<u32> = calls
        .iter()
        .map(|&c| u32::try_from(c).ok())
        .collect::<Option<_>>()?;
    calls.sort_unstable();
    calls.dedup();
    let mut code: Vec<(u16, u32, To, To)> = vec![
        (BPF_LD_W_ABS, DATA_ARCH, To::Next, To::Next),
        (BPF_JMP_JEQ_K, arch, To::Next, To::Full),
        (BPF_LD_W_ABS, DATA_NR, To::Next, To::Next),
    ];
    if std::env::consts::ARCH == "x86_64" {
        code.push((
            BPF_JMP_JGE_K,
            X32_SYSCALL_BIT,
            To::Next,
            To::At(code.len() + 2),
        ));
        code.push((
            BPF_RET_K,
            RET_ERRNO | nix::libc::ENOSYS as u32,
            To::Next,
            To::Next,
        ));
    }
    search(&calls, &mut code);
    let allow = code.len();
    code.push((BPF_RET_K, RET_ALLOW, To::Next, To::Next));
    let offset = |at: usize, to: To| -> Option<u8> {
        let target = match to {
            To::Next => at + 1,
            To::At(target) => target,
            To::Allow => allow,
            To::Full => allow + 1,
        };
        u8::try_from(target.checked_sub(at + 1)?).ok()
    };
    let mut program = Vec::with_capacity(code.len() + full.len());
    for (at, &(op, k, jt, jf)) in code.iter().enumerate() {
        program.push(seccompiler::sock_filter {
            code: op,
            jt: offset(at, jt)?,
            jf: offset(at, jf)?,
            k,
        });
    }
    program.extend_from_slice(full);
    Some(program)
}

/// The search over sorted `calls`: a named one jumps to the full program, any other to the
/// `allow`. Leaves of up to three numbers are tested one by one.
fn search(calls: &[u32], code: &mut Vec<(u16, u32, To, To)>) {
    if calls.len() <= 3 {
        for (i, &call) in calls.iter().enumerate() {
            let otherwise = if i + 1 == calls.len() {
                To::Allow
            } else {
                To::Next
            };
            code.push((BPF_JMP_JEQ_K, call, To::Full, otherwise));
        }
        return;
    }
    let middle = calls.len() / 2;
    let split = code.len();
    code.push((BPF_JMP_JGE_K, calls[middle], To::Next, To::Next));
    search(&calls[..middle], code);
    code[split].2 = To::At(code.len());
    search(&calls[middle..], code);
}

/// The `AUDIT_ARCH_*` value of this machine's calls, as the kernel puts it in `seccomp_data`.
fn audit_arch() -> Option<u32> {
    match std::env::consts::ARCH {
        "x86_64" => Some(0xc000_003e),
        "aarch64" => Some(0xc000_00b7),
        "riscv64" => Some(0xc000_00f3),
        _ => None,
    }
}

/// The parts of [`filter`], in the order they run, and every call number they name.
fn build(own_namespaces: bool) -> Result<(Vec<BpfProgram>, Vec<i64>), seccompiler::Error> {
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
    let calls = refused
        .keys()
        .copied()
        .chain([nix::libc::SYS_clone3])
        .collect();
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
    Ok((vec![refuse.try_into()?, no_clone3.try_into()?], calls))
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
        let (parts, _) = build(true).unwrap();
        let full = chain(parts);
        assert!(own.len() > full.len(), "the search comes first");
        assert_eq!(own[own.len() - full.len()..], full[..]);
    }

    /// Runs a filter as the kernel would on one call (the classic BPF instructions filters
    /// use): its return value.
    fn verdict(program: &[seccompiler::sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let mut data = Vec::with_capacity(64);
        data.extend_from_slice(&nr.to_le_bytes());
        data.extend_from_slice(&arch.to_le_bytes());
        data.extend_from_slice(&0u64.to_le_bytes());
        for arg in args {
            data.extend_from_slice(&arg.to_le_bytes());
        }
        use nix::libc::{BPF_ALU, BPF_AND, BPF_JGT, BPF_JMP, BPF_JSET, BPF_K};
        const AND_K: u16 = (BPF_ALU | BPF_AND | BPF_K) as u16;
        const JGT_K: u16 = (BPF_JMP | BPF_JGT | BPF_K) as u16;
        const JSET_K: u16 = (BPF_JMP | BPF_JSET | BPF_K) as u16;
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = &program[pc];
            pc += 1;
            let (jt, jf) = (usize::from(i.jt), usize::from(i.jf));
            match i.code {
                BPF_LD_W_ABS => {
                    let at = i.k as usize;
                    a = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
                }
                AND_K => a &= i.k,
                BPF_JMP_JEQ_K => pc += if a == i.k { jt } else { jf },
                BPF_JMP_JGE_K => pc += if a >= i.k { jt } else { jf },
                JGT_K => pc += if a > i.k { jt } else { jf },
                JSET_K => pc += if a & i.k != 0 { jt } else { jf },
                BPF_JMP_JA => pc += i.k as usize,
                BPF_RET_K => return i.k,
                other => panic!("instruction {other:#x} at {}", pc - 1),
            }
        }
    }

    /// The search in front answers every call as the full program does: all numbers of this
    /// architecture (with the arguments its rules look at), calls of another architecture;
    /// only x32 calls, which the full program let through, are "not implemented".
    #[test]
    fn the_search_in_front_decides_as_the_full_program() {
        use nix::libc::{AF_INET, AF_NETLINK, AF_UNIX, SOCK_DGRAM, SOCK_NONBLOCK, SOCK_STREAM};
        let arch = audit_arch().unwrap();
        let mut arguments = vec![[0u64; 6]];
        for flag in NAMESPACE_FLAGS {
            arguments.push([
                (*flag as u32 as u64) | nix::libc::SIGCHLD as u64,
                0,
                0,
                0,
                0,
                0,
            ]);
        }
        for (family, kind) in [
            (AF_INET, SOCK_DGRAM | SOCK_NONBLOCK),
            (AF_INET, SOCK_STREAM),
            (AF_UNIX, SOCK_STREAM),
            (AF_NETLINK, SOCK_DGRAM),
        ] {
            arguments.push([family as u64, kind as u64, 0, 0, 0, 0]);
        }
        for own_namespaces in [true, false] {
            let (parts, calls) = build(own_namespaces).unwrap();
            let full = chain(parts);
            let fast = shortcut(&calls, &full).unwrap();
            assert_eq!(&fast, filter(own_namespaces).unwrap());
            let mut refused = 0;
            for nr in 0..1024 {
                for args in &arguments {
                    let expected = verdict(&full, arch, nr, *args);
                    assert_eq!(
                        verdict(&fast, arch, nr, *args),
                        expected,
                        "call {nr} {args:?}"
                    );
                    refused += usize::from(expected != RET_ALLOW);
                    // Another architecture's calls: the full program kills the process.
                    let i386 = 0x4000_0003;
                    assert_eq!(
                        verdict(&fast, i386, nr, *args),
                        verdict(&full, i386, nr, *args)
                    );
                }
            }
            assert!(refused > calls.len(), "the rules refuse calls");
            if std::env::consts::ARCH == "x86_64" {
                let x32_mount = X32_SYSCALL_BIT | nix::libc::SYS_mount as u32;
                assert_eq!(verdict(&full, arch, x32_mount, [0; 6]), RET_ALLOW);
                let not_implemented = RET_ERRNO | nix::libc::ENOSYS as u32;
                assert_eq!(verdict(&fast, arch, x32_mount, [0; 6]), not_implemented);
            }
        }
        let many: Vec<i64> = (0..600).collect();
        let (parts, _) = build(true).unwrap();
        assert!(
            shortcut(&many, &chain(parts)).is_none(),
            "jumps too long for 8 bits"
        );
    }

    /// Every `allow` of the first part jumps to the second part's start, which the kernel's
    /// rules require to be forward and inside the program; the last part keeps its returns.
    #[test]
    fn a_chained_filter_passes_what_one_part_allows_to_the_next() {
        let (parts, _) = build(true).unwrap();
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
