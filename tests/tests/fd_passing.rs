//! `handles_cuda::{send_fd, receive_fd}`: a descriptor and bytes over a Unix socket.
//!
//! The first tests need no GPU: they pass a memfd or a pipe across `UnixStream::pair()` and
//! into a child process, and check the error cases (no descriptor, two, too many, a payload
//! too long or cut short) and that no received descriptor stays open after an error. The last
//! one runs the README's IPC flow, parent and child processes, on the simulated driver and
//! checks both processes' reports.

mod simulator;

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};

use handles_cuda::{
    ContextHandle, DevicePtrHandle, MemoryPoolHandle, PoolProps, StreamFlags, StreamHandle,
    ipc::{IpcPointer, MAX_FD_PAYLOAD, receive_fd, send_fd},
};
use simulator::{Scratch, describe_leaks, describe_violations, say, tail, this_binary};

/// Set in a child process of this binary to the role it plays.
const ROLE: &str = "HANDLES_FD_PASSING_ROLE";

fn memfd(content: &[u8]) -> File {
    // SAFETY: the name is a NUL-terminated string; the flags are valid.
    let fd = unsafe { libc::memfd_create(c"handles-fd-passing".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let mut file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    file.write_all(content).unwrap();
    file
}

fn read_all_at_zero(fd: &OwnedFd) -> Vec<u8> {
    let file = File::from(fd.try_clone().unwrap());
    let len = file.metadata().unwrap().len() as usize;
    let mut bytes = vec![0; len];
    file.read_exact_at(&mut bytes, 0).unwrap();
    bytes
}

fn is_cloexec(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only reads the descriptor's flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    assert!(flags >= 0);
    flags & libc::FD_CLOEXEC != 0
}

/// A message written by hand with `sendmsg`: any number of descriptors (none included) and
/// any bytes, to make the malformed messages `send_fd` never sends.
fn raw_send(stream: &UnixStream, fds: &[RawFd], bytes: &[u8]) {
    let fds_len = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fds_len) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: a zeroed msghdr is a valid empty header.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    if !fds.is_empty() {
        header.msg_control = control.as_mut_ptr().cast();
        header.msg_controllen = space as _;
        // SAFETY: `control` has CMSG_SPACE(fds_len) bytes, 8-byte aligned, so the first
        // header and its data fit in it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&header);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fds_len) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(cmsg),
                fds_len as usize,
            );
        }
    }
    // SAFETY: the header points at live buffers of the lengths it states.
    let sent = unsafe { libc::sendmsg(stream.as_raw_fd(), &header, 0) };
    assert_eq!(
        sent,
        bytes.len() as isize,
        "sendmsg: {}",
        std::io::Error::last_os_error()
    );
}

fn framed(announced: u32, payload: &[u8]) -> Vec<u8> {
    let mut bytes = announced.to_le_bytes().to_vec();
    bytes.extend_from_slice(payload);
    bytes
}

/// Serialises the tests that start child processes with those that check that every copy of
/// a descriptor is closed: a child forked by another test thread holds copies of this
/// process's descriptors (even close-on-exec ones) until it execs, and would keep a pipe's
/// read end open for an instant.
fn no_fork_meanwhile() -> std::sync::MutexGuard<'static, ()> {
    static FORKS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    FORKS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A pipe whose read end is to be sent; after the receiver has closed what it received, and
/// our own read end is dropped, writing reports `BrokenPipe` exactly when no copy of the read
/// end is left open anywhere.
fn pipe() -> (OwnedFd, std::io::PipeWriter) {
    let (reader, writer) = std::io::pipe().unwrap();
    (OwnedFd::from(reader), writer)
}

fn assert_all_readers_closed(mut writer: std::io::PipeWriter) {
    let error = writer.write_all(b"x").unwrap_err();
    assert_eq!(
        error.kind(),
        ErrorKind::BrokenPipe,
        "a received read end is still open: {error}"
    );
}

#[test]
fn memfd_and_payload_cross_a_socket_pair() {
    let _forks = no_fork_meanwhile();
    let (left, right) = UnixStream::pair().unwrap();
    let file = memfd(b"the pool's memory");
    let pointer = IpcPointer {
        export_data: [7; 64],
        size: 4096,
    };
    send_fd(&left, file.as_fd(), &pointer.to_bytes()).unwrap();
    let (fd, payload) = receive_fd(&right, IpcPointer::LEN).unwrap();
    assert_eq!(read_all_at_zero(&fd), b"the pool's memory");
    assert_eq!(IpcPointer::from_bytes(&payload).unwrap(), pointer);
    assert!(
        is_cloexec(fd.as_raw_fd()),
        "received descriptors are close-on-exec"
    );
    assert_ne!(fd.as_raw_fd(), file.as_raw_fd(), "a new descriptor");

    // Messages keep their boundaries, including empty and large payloads.
    let big: Vec<u8> = (0..300_000).map(|i| (i % 253) as u8).collect();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            send_fd(&left, file.as_fd(), b"").unwrap();
            send_fd(&left, file.as_fd(), &big).unwrap();
            send_fd(&left, file.as_fd(), b"last").unwrap();
        });
        assert_eq!(receive_fd(&right, 0).unwrap().1, b"");
        assert_eq!(receive_fd(&right, big.len()).unwrap().1, big);
        assert_eq!(receive_fd(&right, 16).unwrap().1, b"last");
    });
}

#[test]
fn payload_over_the_limit_is_refused_before_sending() {
    let (left, _right) = UnixStream::pair().unwrap();
    let file = memfd(b"");
    let error = send_fd(&left, file.as_fd(), &vec![0; MAX_FD_PAYLOAD + 1]).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidInput);
}

#[test]
fn message_without_a_descriptor_is_an_error() {
    let (left, right) = UnixStream::pair().unwrap();
    raw_send(&left, &[], &framed(3, b"abc"));
    let error = receive_fd(&right, 16).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidData);
    assert!(error.to_string().contains("no descriptor"), "{error}");
}

#[test]
fn message_with_two_descriptors_is_an_error_and_closes_both() {
    let _forks = no_fork_meanwhile();
    let (left, right) = UnixStream::pair().unwrap();
    let (reader, writer) = pipe();
    let copy = reader.try_clone().unwrap();
    raw_send(
        &left,
        &[reader.as_raw_fd(), copy.as_raw_fd()],
        &framed(3, b"abc"),
    );
    drop((reader, copy));
    let error = receive_fd(&right, 16).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidData);
    assert!(error.to_string().contains("2 descriptors"), "{error}");
    assert_all_readers_closed(writer);
}

#[test]
fn message_with_too_many_descriptors_is_an_error_and_closes_them() {
    let _forks = no_fork_meanwhile();
    let (left, right) = UnixStream::pair().unwrap();
    let (reader, writer) = pipe();
    let copies: Vec<OwnedFd> = (0..20).map(|_| reader.try_clone().unwrap()).collect();
    let raw: Vec<RawFd> = copies.iter().map(|fd| fd.as_raw_fd()).collect();
    raw_send(&left, &raw, &framed(3, b"abc"));
    drop((reader, copies));
    let error = receive_fd(&right, 16).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidData);
    assert!(error.to_string().contains("MSG_CTRUNC"), "{error}");
    assert_all_readers_closed(writer);
}

#[test]
fn payload_longer_than_expected_is_an_error_and_closes_the_descriptor() {
    let _forks = no_fork_meanwhile();
    let (left, right) = UnixStream::pair().unwrap();
    let (reader, writer) = pipe();
    send_fd(&left, reader.as_fd(), &[1; 100]).unwrap();
    drop(reader);
    let error = receive_fd(&right, IpcPointer::LEN).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidData);
    assert!(error.to_string().contains("100 bytes"), "{error}");
    assert_all_readers_closed(writer);
}

#[test]
fn payload_cut_short_is_an_error_and_closes_the_descriptor() {
    let _forks = no_fork_meanwhile();
    let (left, right) = UnixStream::pair().unwrap();
    let (reader, writer) = pipe();
    // The header announces 72 bytes; 10 arrive, then the sender hangs up.
    raw_send(&left, &[reader.as_raw_fd()], &framed(72, &[5; 10]));
    drop((reader, left));
    let error = receive_fd(&right, IpcPointer::LEN).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::UnexpectedEof);
    assert_all_readers_closed(writer);

    // A peer that closes without sending anything.
    let (left, right) = UnixStream::pair().unwrap();
    drop(left);
    let error = receive_fd(&right, 16).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::UnexpectedEof);
}

#[test]
fn memfd_crosses_into_a_child_process() {
    let _forks = no_fork_meanwhile();
    let (parent, child_end) = UnixStream::pair().unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "child_reads_the_memfd",
            "--exact",
            "--include-ignored",
            "--nocapture",
        ])
        .env(ROLE, "memfd")
        // The child's end becomes its standard input, the one descriptor a child inherits
        // without any unsafe code.
        .stdin(Stdio::from(OwnedFd::from(child_end)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let file = memfd(b"shared with the child");
    send_fd(&parent, file.as_fd(), b"payload for the child").unwrap();
    let mut answer = String::new();
    (&parent).read_to_string(&mut answer).unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "child failed: {}\n{}",
        stdout,
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(answer, "shared with the child|payload for the child");
}

#[test]
#[ignore = "a child process, started by memfd_crosses_into_a_child_process"]
fn child_reads_the_memfd() {
    assert_eq!(
        std::env::var(ROLE).as_deref(),
        Ok("memfd"),
        "run by the parent"
    );
    let socket = UnixStream::from(std::io::stdin().as_fd().try_clone_to_owned().unwrap());
    let (fd, payload) = receive_fd(&socket, 64).unwrap();
    assert!(is_cloexec(fd.as_raw_fd()));
    let content = read_all_at_zero(&fd);
    let mut answer = content;
    answer.push(b'|');
    answer.extend_from_slice(&payload);
    (&socket).write_all(&answer).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Taking a descriptor by pid and number (`take_fd`: pidfd_open + pidfd_getfd), no socket.

/// Starts this binary's ignored test `test` as a child playing `role`, with piped stdin and
/// stdout.
fn start_child(test: &str, role: &str) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--include-ignored", "--nocapture"])
        .env(ROLE, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The first line of `child`'s stdout that starts with `tag`, split after it.
fn announced(lines: &mut impl Iterator<Item = std::io::Result<String>>, tag: &str) -> Vec<String> {
    let line = lines
        .map(Result::unwrap)
        .find_map(|line| line.find(tag).map(|at| line[at + tag.len()..].to_owned()))
        .unwrap_or_else(|| panic!("the child never printed {tag:?}"));
    line.split_whitespace().map(str::to_owned).collect()
}

fn expect_fd_take(result: handles_cuda::Result<OwnedFd>, call: &str, errno: i32) {
    match result {
        Err(handles_cuda::Error::FdTake {
            call: found,
            errno: got,
            ..
        }) if found == call && got == errno => {}
        other => panic!("expected FdTake {{ call: {call}, errno: {errno} }}, got {other:?}"),
    }
}

/// A child holds a memfd and announces its pid and descriptor number; the parent takes the
/// descriptor with `take_fd`, reads what the child wrote and writes through it (the child reads
/// that back). A descriptor the child has not open is `EBADF`, a process that has exited
/// `ESRCH`, a pid of 0 `EINVAL`: each an `Error::FdTake` naming the call.
#[test]
fn take_fd_takes_a_descriptor_of_a_child_process() {
    use std::io::BufRead;
    let _forks = no_fork_meanwhile();
    let mut child = start_child("fd_holder", "holder");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let fields = announced(&mut lines, "HOLD ");
    let (pid, fd): (u32, i32) = (fields[0].parse().unwrap(), fields[1].parse().unwrap());
    assert_eq!(pid, child.id());

    let taken = handles_cuda::ipc::take_fd(pid, fd).unwrap();
    assert!(is_cloexec(taken.as_raw_fd()), "taken close-on-exec");
    assert_eq!(read_all_at_zero(&taken), b"written by the child");
    File::from(taken.try_clone().unwrap())
        .write_all_at(b"WRITTEN", 0)
        .unwrap();
    expect_fd_take(
        handles_cuda::ipc::take_fd(pid, 4093),
        "pidfd_getfd",
        libc::EBADF,
    );
    expect_fd_take(
        handles_cuda::ipc::take_fd(pid, -1),
        "pidfd_getfd",
        libc::EBADF,
    );
    expect_fd_take(
        handles_cuda::ipc::take_fd(0, fd),
        "pidfd_open",
        libc::EINVAL,
    );

    drop(child.stdin.take()); // the child reads its memfd back, prints it and exits
    let back = announced(&mut lines, "BACK ");
    assert_eq!(
        back.join(" "),
        "WRITTEN by the child",
        "the parent's write reached the child"
    );
    lines.for_each(drop);
    assert!(child.wait().unwrap().success());
    // Our copy outlives the exporter: the open file is still there.
    assert_eq!(read_all_at_zero(&taken), b"WRITTEN by the child");
    let gone = handles_cuda::ipc::take_fd(pid, fd);
    expect_fd_take(gone, "pidfd_open", libc::ESRCH);
    let message = handles_cuda::ipc::take_fd(pid, fd).unwrap_err().to_string();
    assert!(
        message.starts_with(&format!(
            "taking descriptor {fd} of process {pid} failed: pidfd_open: no such process"
        )),
        "{message}"
    );
}

#[test]
#[ignore = "a child process, started by take_fd_takes_a_descriptor_of_a_child_process"]
fn fd_holder() {
    assert_eq!(
        std::env::var(ROLE).as_deref(),
        Ok("holder"),
        "run by the parent"
    );
    let file = memfd(b"written by the child");
    // The parent is an ancestor, which Yama's ptrace_scope 1 allows anyway; naming it shows
    // the opt-in works (`false` on a kernel without Yama).
    let parent = std::os::unix::process::parent_id();
    let registered = handles_cuda::ipc::allow_fd_taking_by(parent).unwrap();
    println!(
        "HOLD {} {} (PR_SET_PTRACER registered: {registered})",
        std::process::id(),
        file.as_raw_fd()
    );
    std::io::stdout().flush().unwrap();
    let mut rest = String::new();
    std::io::stdin().read_to_string(&mut rest).unwrap();
    let mut back = vec![0u8; 20];
    file.read_exact_at(&mut back, 0).unwrap();
    println!("BACK {}", String::from_utf8_lossy(&back));
    handles_cuda::ipc::disallow_fd_taking().unwrap();
}

/// A process without ptrace rights over another is refused with `EPERM`: a child drops to
/// user `nobody` and tries to take a descriptor of this (root) process. Run as another user,
/// the target is process 1 if it belongs to someone else.
#[test]
fn take_fd_without_the_right_is_eperm() {
    use std::os::unix::fs::MetadataExt;
    let _forks = no_fork_meanwhile();
    // SAFETY: getuid has no preconditions.
    let root = unsafe { libc::getuid() } == 0;
    let target = if root {
        std::process::id()
    } else {
        let owner = std::fs::metadata("/proc/1").map(|meta| meta.uid());
        // SAFETY: as above.
        if owner.ok() == Some(unsafe { libc::getuid() }) {
            say("take_fd EPERM: not root, and process 1 is ours: no process to be refused by");
            return;
        }
        1
    };
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "unprivileged_taker",
            "--exact",
            "--include-ignored",
            "--nocapture",
        ])
        .env(ROLE, "taker")
        .env("HANDLES_TAKE_FROM", target.to_string())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the taker failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    say(format!(
        "take_fd EPERM: {}",
        stdout
            .lines()
            .find(|line| line.starts_with("refused"))
            .unwrap_or("")
    ));
}

#[test]
#[ignore = "a child process, started by take_fd_without_the_right_is_eperm"]
fn unprivileged_taker() {
    assert_eq!(
        std::env::var(ROLE).as_deref(),
        Ok("taker"),
        "run by the parent"
    );
    let target: u32 = std::env::var("HANDLES_TAKE_FROM").unwrap().parse().unwrap();
    // SAFETY: plain system calls that change only this process's credentials.
    unsafe {
        if libc::getuid() == 0 {
            assert_eq!(libc::setgroups(0, std::ptr::null()), 0);
            assert_eq!(libc::setresgid(65534, 65534, 65534), 0);
            assert_eq!(libc::setresuid(65534, 65534, 65534), 0);
        }
    }
    let refused = handles_cuda::ipc::take_fd(target, 0);
    expect_fd_take(
        refused.map_err(|error| {
            println!("refused: {error}");
            error
        }),
        "pidfd_getfd",
        libc::EPERM,
    );
}

// ---------------------------------------------------------------------------------------------
// The README's IPC example, on the simulated driver.

const PATTERN_LEN: usize = 1 << 16;

fn pattern() -> Vec<u8> {
    (0..PATTERN_LEN).map(|i| (i * 7 % 251) as u8).collect()
}

/// Runs the exporter (and, through it, the importer) on the simulator; both processes'
/// reports must show no violation and no leak.
#[test]
fn ipc_pool_and_pointer_cross_a_socket_on_the_simulator() {
    let _forks = no_fork_meanwhile();
    let scratch = Scratch::new("fd_passing_ipc");
    let mut command = this_binary();
    command
        .args([
            "ipc_exporter",
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "exporter");
    cuda_sim::SimCommand::sim_report(&mut command, scratch.join("report-%p.json"));
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the exporter failed ({:?}):\n{}\n{}",
        output.status,
        tail(&stdout, 40),
        tail(&String::from_utf8_lossy(&output.stderr), 40)
    );
    let reports: Vec<_> = std::fs::read_dir(&scratch.0)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(reports.len(), 2, "a report from each process: {reports:?}");
    for path in reports {
        let report = cuda_sim::Report::read(&path).unwrap();
        say(format!(
            "ipc over a socket, {}: {}; leaks: {}",
            path.file_name().unwrap().to_string_lossy(),
            describe_violations(&report, 5),
            describe_leaks(&report.leaks)
        ));
        assert!(
            report.violations.is_empty(),
            "{}",
            describe_violations(&report, 10)
        );
        assert!(
            report.leaks_without_primary().is_empty(),
            "leaked: {}",
            describe_leaks(&report.leaks)
        );
    }
}

#[test]
#[ignore = "a child process on the simulator, started by ipc_pool_and_pointer_cross_a_socket_on_the_simulator"]
fn ipc_exporter() {
    assert_eq!(
        std::env::var(ROLE).as_deref(),
        Ok("exporter"),
        "run by the parent"
    );
    {
        let context = ContextHandle::primary(0).unwrap();
        let stream = StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0).unwrap();
        let pool = MemoryPoolHandle::create(&PoolProps {
            ipc: true,
            ..PoolProps::device(0)
        })
        .unwrap();
        let buffer = DevicePtrHandle::alloc_from_pool(&pool, PATTERN_LEN, &stream).unwrap();
        buffer.copy_from_host(&pattern(), &stream).unwrap();
        stream.synchronize().unwrap();

        let (socket, child_end) = UnixStream::pair().unwrap();
        // The importer inherits the simulator's library path and report setting.
        let importer = Command::new(std::env::current_exe().unwrap())
            .args([
                "ipc_importer",
                "--exact",
                "--include-ignored",
                "--nocapture",
            ])
            .env(ROLE, "importer")
            .stdin(Stdio::from(OwnedFd::from(child_end)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pool_fd = pool.export_posix_fd().unwrap();
        send_fd(
            &socket,
            pool_fd.as_fd(),
            &buffer.export_ipc().unwrap().to_bytes(),
        )
        .unwrap();
        let output = importer.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "the importer failed:\n{}\n{}",
            tail(&stdout, 40),
            tail(&String::from_utf8_lossy(&output.stderr), 40)
        );
        // The exporter's copy is intact.
        let mut back = vec![0; PATTERN_LEN];
        buffer.copy_to_host(&mut back, &stream).unwrap();
        assert_eq!(back, pattern());
    }
    handles_cuda::exec::clear_primary_cache();
}

#[test]
#[ignore = "a grandchild process on the simulator, started by ipc_exporter"]
fn ipc_importer() {
    assert_eq!(
        std::env::var(ROLE).as_deref(),
        Ok("importer"),
        "run by the exporter"
    );
    {
        let socket = UnixStream::from(std::io::stdin().as_fd().try_clone_to_owned().unwrap());
        let (pool_fd, bytes) = receive_fd(&socket, IpcPointer::LEN).unwrap();
        let pointer = IpcPointer::from_bytes(&bytes).unwrap();
        let context = ContextHandle::primary(0).unwrap();
        let stream = StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0).unwrap();
        let pool = MemoryPoolHandle::import_posix_fd(pool_fd.as_fd(), 0).unwrap();
        drop(pool_fd);
        let buffer = DevicePtrHandle::import_ipc(&pool, &pointer, &stream).unwrap();
        let mut back = vec![0; PATTERN_LEN];
        buffer.copy_to_host(&mut back, &stream).unwrap();
        assert_eq!(back, pattern());
    }
    handles_cuda::exec::clear_primary_cache();
}
