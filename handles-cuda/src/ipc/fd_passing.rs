//! Passing a file descriptor (an IPC pool's, from [`MemoryPoolHandle::export_posix_fd`]) and
//! bytes (an [`IpcPointer`] or [`IpcEventHandle`] token) to another process over a Unix
//! socket, with `SCM_RIGHTS`.
//!
//! [`send_fd`] and [`receive_fd`] exchange one *message*: a descriptor and a payload of up to
//! [`MAX_FD_PAYLOAD`] bytes. On the wire it is a 4-byte little-endian payload length followed by
//! the payload; the descriptor rides on the first byte. Both ends must use these functions.
//!
//! [`MemoryPoolHandle::export_posix_fd`]: crate::MemoryPoolHandle::export_posix_fd
//! [`IpcPointer`]: crate::ipc::IpcPointer
//! [`IpcEventHandle`]: crate::ipc::IpcEventHandle

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// The largest payload one message carries (1 MiB); the length header is checked against it
/// and against the receiver's own limit before anything is allocated.
pub const MAX_FD_PAYLOAD: usize = 1 << 20;

/// How many descriptors one receive can take in: a well-formed message has exactly one, and
/// room for more lets [`receive_fd`] take in and close a few extras instead of having the
/// kernel drop them.
const FD_ROOM: usize = 8;

const HEADER: usize = 4;

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// Sends `fd` and `payload` as one message on `stream` (`sendmsg` with `SCM_RIGHTS`).
///
/// The receiving process gets its own descriptor for the same open file (here, the pool);
/// `fd` stays open in this process. Blocks until everything is written (a partial write is
/// completed with plain writes; the descriptor went with the first byte).
///
/// # Errors
///
/// [`io::ErrorKind::InvalidInput`] if `payload` is longer than [`MAX_FD_PAYLOAD`]; any error of
/// `sendmsg` or `write` (a closed peer gives [`io::ErrorKind::BrokenPipe`]).
pub fn send_fd(stream: &UnixStream, fd: BorrowedFd<'_>, payload: &[u8]) -> io::Result<()> {
    if payload.len() > MAX_FD_PAYLOAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a payload of {} bytes is longer than the limit of {MAX_FD_PAYLOAD}",
                payload.len()
            ),
        ));
    }
    let header = (payload.len() as u32).to_le_bytes();
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other(
            "no room for the descriptor's control message",
        ));
    }
    let iov = [IoSlice::new(&header), IoSlice::new(payload)];
    let sent = loop {
        match rustix::net::sendmsg(stream, &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(sent) => break sent,
            Err(rustix::io::Errno::INTR) => continue,
            Err(error) => return Err(error.into()),
        }
    };
    // Whatever `sendmsg` did not take goes out as plain bytes; the descriptor is already sent.
    if sent < HEADER + payload.len() {
        let mut message = header.to_vec();
        message.extend_from_slice(payload);
        (&*stream).write_all(&message[sent..])?;
    }
    Ok(())
}

/// Receives one message sent by [`send_fd`]: the descriptor and the payload, which must be at
/// most `max_payload` bytes (and at most [`MAX_FD_PAYLOAD`]).
///
/// The descriptor is received close-on-exec (`MSG_CMSG_CLOEXEC`), so it does not leak into
/// processes this one starts. Blocks until the whole message has arrived.
///
/// # Errors
///
/// All errors leave no descriptor open: whatever was received is closed before returning.
///
/// - [`io::ErrorKind::UnexpectedEof`]: the peer closed the stream before a whole message;
/// - [`io::ErrorKind::InvalidData`]: the message carries no descriptor, or more than one, or
///   the kernel dropped descriptors for lack of room (`MSG_CTRUNC`), or its length header
///   announces more than `max_payload` bytes;
/// - any error of `recvmsg` or `read`.
///
/// After an error the stream's position within the byte stream is unknown: do not receive on
/// it again.
pub fn receive_fd(stream: &UnixStream, max_payload: usize) -> io::Result<(OwnedFd, Vec<u8>)> {
    let max_payload = max_payload.min(MAX_FD_PAYLOAD);
    let mut first = vec![0u8; HEADER + max_payload];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FD_ROOM))];
    // Dropping the buffer closes every descriptor still in it, on every return path.
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = loop {
        let mut iov = [IoSliceMut::new(&mut first)];
        match rustix::net::recvmsg(stream, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(received) => break received,
            Err(rustix::io::Errno::INTR) => continue,
            Err(error) => return Err(error.into()),
        }
    };
    // Take every descriptor out, so each one is an `OwnedFd` closed when dropped.
    let mut fds: Vec<OwnedFd> = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    if received.bytes == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the peer closed the stream before sending a message",
        ));
    }
    if received.flags.contains(ReturnFlags::CTRUNC) {
        return Err(invalid(format!(
            "the message carried more descriptors than the {FD_ROOM} there was room for \
             (MSG_CTRUNC); expected one"
        )));
    }
    if received.flags.contains(ReturnFlags::TRUNC) {
        return Err(invalid(format!(
            "the message was longer than {} bytes (MSG_TRUNC)",
            first.len()
        )));
    }
    let fd = match <[OwnedFd; 1]>::try_from(fds) {
        Ok([fd]) => fd,
        Err(fds) if fds.is_empty() => {
            return Err(invalid("the message carried no descriptor".into()));
        }
        Err(fds) => {
            return Err(invalid(format!(
                "the message carried {} descriptors; expected one",
                fds.len()
            )));
        }
    };
    let mut filled = received.bytes;
    if filled < HEADER {
        (&*stream).read_exact(&mut first[filled..HEADER])?;
        filled = HEADER;
    }
    let len = u32::from_le_bytes(first[..HEADER].try_into().expect("four bytes")) as usize;
    if len > max_payload {
        return Err(invalid(format!(
            "the message announces a payload of {len} bytes, more than the {max_payload} \
             expected"
        )));
    }
    if filled > HEADER + len {
        return Err(invalid(format!(
            "received {} payload bytes, more than the {len} announced",
            filled - HEADER
        )));
    }
    (&*stream).read_exact(&mut first[filled..HEADER + len])?;
    first.truncate(HEADER + len);
    first.drain(..HEADER);
    Ok((fd, first))
}
