//! PID 1's private socket (`/run/systemd/private`): a direct D-Bus connection to systemd, the one `systemctl` uses
//! as root. Over the system bus every call also costs dbus-daemon a routing step, and every job costs PID 1 the
//! tracking of its caller (four calls of its own to dbus-daemon per `StartUnit`); here neither happens, and PID 1
//! sends its signals to every direct connection without a `Subscribe`.
//!
//! systemd marks what it sends here with the sender `org.freedesktop.systemd1`, a well-known name, where D-Bus
//! puts a unique name, and a direct connection none (zbus refuses it: "Invalid unique name"). [`Reader`] frames the
//! incoming byte stream into messages and takes exactly that sender field out of each; every other byte reaches
//! zbus as systemd sent it. The authentication (`EXTERNAL` with this process's uid) happens
//! before zbus gets the socket, so no byte of a message passes the handshake.

use std::io;
use std::ops::Range;
use std::path::Path;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use zbus::Connection;
use zbus::connection::socket::{ReadHalf, Socket, Split, WriteHalf};

/// Where systemd's system instance listens for direct connections (root only).
pub const PRIVATE_SOCKET: &str = "/run/systemd/private";

/// The sender systemd writes on its private socket.
const SYSTEMD_SENDER: &[u8] = b"org.freedesktop.systemd1";

/// The D-Bus limit on a whole message (2²⁷ bytes).
const MAX_MESSAGE: usize = 1 << 27;
/// A primary header: endianness, type, flags, version, body length, serial, header fields' length.
const PRIMARY_HEADER: usize = 16;
/// Room for the bytes one read takes from the socket.
const READ_SIZE: usize = 16 * 1024;
/// Header field code of the sender.
const SENDER_FIELD: u8 = 7;

/// Connects to systemd's private socket at `path`, authenticates as this process's uid and returns a peer-to-peer
/// zbus connection over it.
pub async fn connect(path: &Path) -> io::Result<Connection> {
    let mut stream = UnixStream::connect(path).await?;
    // EXTERNAL with the uid as a decimal string, hex-encoded, as sd-bus and dbus-daemon expect it.
    // SAFETY: getuid has no preconditions and cannot fail.
    let hex = hex::encode(unsafe { libc::getuid() }.to_string());
    // BEGIN goes with AUTH in one write, as sd-bus's own clients send it, so that systemd has left the handshake
    // before our first message arrives. Sent after its OK instead, a connection made while systemd booted hung at
    // its first call (the call sent, no byte back; most likely BEGIN and the call came to PID 1 in one read).
    stream.write_all(format!("\0AUTH EXTERNAL {hex}\r\nBEGIN\r\n").as_bytes()).await?;
    let (read, write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut line = String::new();
    read.read_line(&mut line).await?;
    let guid = match line.trim_end().strip_prefix("OK ") {
        Some(guid) => guid.to_owned(),
        None => {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("systemd refused the authentication on {}: {:?}", path.display(), line.trim_end()),
            ));
        }
    };
    // Whatever the buffer holds past the OK line belongs to the messages.
    let early = read.buffer().to_vec();
    let reader = Reader { half: read.into_inner(), buffer: early, start: 0, framed: 0 };
    let socket = PrivateSocket { reader, writer: Writer(write) };
    zbus::connection::Builder::authenticated_socket(socket, guid.as_str())
        .p2p()
        .build()
        .await
        .map_err(|e| io::Error::other(e.to_string()))
}

struct PrivateSocket {
    reader: Reader,
    writer: Writer,
}

impl Socket for PrivateSocket {
    type ReadHalf = Reader;
    type WriteHalf = Writer;

    fn split(self) -> Split<Reader, Writer> {
        Split::new(self.reader, self.writer)
    }
}

/// The receiving half: bytes read from the socket wait in `buffer`; `buffer[start..framed]` is a whole message
/// without its sender, handed to zbus in whatever pieces it asks for; `buffer[framed..]` is the start of the next.
#[derive(Debug)]
pub(super) struct Reader {
    half: OwnedReadHalf,
    buffer: Vec<u8>,
    start: usize,
    framed: usize,
}

#[async_trait::async_trait]
impl ReadHalf for Reader {
    async fn recvmsg(&mut self, out: &mut [u8]) -> io::Result<(usize, Vec<std::os::fd::OwnedFd>)> {
        loop {
            if self.start < self.framed {
                let n = out.len().min(self.framed - self.start);
                out[..n].copy_from_slice(&self.buffer[self.start..self.start + n]);
                self.start += n;
                return Ok((n, Vec::new()));
            }
            if let Some(len) = message_length(&self.buffer[self.framed..])?
                && self.buffer.len() - self.framed >= len
            {
                // Here `start == framed`: the message's first byte is the next to hand out (or, dropped, skipped).
                let message = &mut self.buffer[self.framed..self.framed + len];
                self.start = self.framed + admit(message, &super::events::follows_signal).unwrap_or(len);
                self.framed += len;
                continue;
            }
            // Everything framed is handed out: drop it before reading more, so the buffer keeps only the start of
            // the next message.
            self.buffer.drain(..self.start);
            self.framed -= self.start;
            self.start = 0;
            // Straight into the buffer's spare room (kept between reads): no copy, no allocation per read.
            self.buffer.reserve(READ_SIZE);
            if self.half.read_buf(&mut self.buffer).await? == 0 {
                return Ok((0, Vec::new()));
            }
        }
    }
}

/// The sending half: zbus's bytes go out unchanged.
#[derive(Debug)]
pub(super) struct Writer(OwnedWriteHalf);

#[async_trait::async_trait]
impl WriteHalf for Writer {
    async fn sendmsg(&mut self, buffer: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) -> io::Result<usize> {
        if !fds.is_empty() {
            return Err(io::Error::other("file descriptors cannot be passed on systemd's private socket here"));
        }
        self.0.write(buffer).await
    }

    async fn close(&mut self) -> io::Result<()> {
        self.0.shutdown().await
    }
}

/// The length of the message that `bytes` starts with, once its primary header is there.
pub(super) fn message_length(bytes: &[u8]) -> io::Result<Option<usize>> {
    if bytes.len() < PRIMARY_HEADER {
        return Ok(None);
    }
    let u32_at = |at: usize| read_u32(bytes, at);
    let (Some(body), Some(fields)) = (u32_at(4), u32_at(12)) else {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("bad endianness mark {:#x}", bytes[0])));
    };
    let total = align8(PRIMARY_HEADER + fields as usize) + body as usize;
    if total > MAX_MESSAGE {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a message of {total} bytes")));
    }
    Ok(Some(total))
}

/// What the reader does with one whole message that arrived: `None` drops it (a signal `follows` does not take,
/// as the bus's match rules would have kept it away), `Some(start)` hands `message[start..]` to zbus, with the
/// `org.freedesktop.systemd1` sender taken out when it had one ([`strip_sender`]). `follows` gets a signal's path
/// and member.
pub(super) fn admit(message: &mut [u8], follows: &dyn Fn(&str, &str) -> bool) -> Option<usize> {
    let Some(header) = walk(message) else { return Some(0) };
    if message.get(1) == Some(&SIGNAL) {
        let text = |range: Option<Range<usize>>| range.and_then(|r| std::str::from_utf8(&message[r]).ok());
        let (path, member) = (text(header.path.clone()), text(header.member.clone()));
        if !path.zip(member).is_some_and(|(path, member)| follows(path, member)) {
            return None;
        }
    }
    Some(header.sender.map_or(0, |sender| strip_sender(message, sender)))
}

/// Message type of a signal (byte 1 of the primary header).
const SIGNAL: u8 = 4;
/// Header field codes of the path and the member.
const PATH_FIELD: u8 = 1;
const MEMBER_FIELD: u8 = 3;

/// Where a message's header fields of interest are.
struct Header {
    path: Option<Range<usize>>,
    member: Option<Range<usize>>,
    /// systemd's well-known sender field.
    sender: Option<SenderField>,
}

/// The sender field: where it starts, where its value ends, where the field before it ended, and whether it is the
/// last field.
#[derive(Clone, Copy)]
struct SenderField {
    at: usize,
    value_end: usize,
    previous_end: usize,
    last: bool,
}

/// Walks the header fields of `message` (one whole message); `None` when they cannot be walked (zbus then judges
/// the message as it is).
fn walk(message: &[u8]) -> Option<Header> {
    let fields_end = PRIMARY_HEADER + read_u32(message, 12)? as usize;
    if fields_end > message.len() {
        return None;
    }
    let mut header = Header { path: None, member: None, sender: None };
    let mut at = PRIMARY_HEADER;
    let mut previous_end = PRIMARY_HEADER;
    while at < fields_end {
        let (&code, &sig_len) = (message.get(at)?, message.get(at + 1)?);
        let signature = message.get(at + 2..at + 2 + sig_len as usize)?;
        let value = at + 2 + sig_len as usize + 1;
        let value_end = match signature {
            b"s" | b"o" => {
                let value = align4(value);
                let text = value + 4..value + 4 + read_u32(message, value)? as usize;
                match code {
                    PATH_FIELD => header.path = Some(text.clone()),
                    MEMBER_FIELD => header.member = Some(text.clone()),
                    SENDER_FIELD if message.get(text.clone()) == Some(SYSTEMD_SENDER) => {
                        header.sender = Some(SenderField {
                            at,
                            value_end: text.end + 1,
                            previous_end,
                            last: text.end + 1 >= fields_end,
                        })
                    }
                    _ => {}
                }
                text.end + 1
            }
            b"g" => value + 1 + *message.get(value)? as usize + 1,
            b"u" => align4(value) + 4,
            _ => return None,
        };
        previous_end = value_end;
        at = align8(value_end);
    }
    Some(header)
}

/// Takes systemd's sender field out of `message`, as a direct connection has no senders: the header's bytes
/// before that field move forward over it and the fields' length shrinks. Returns where the message now starts
/// within `message`.
fn strip_sender(message: &mut [u8], sender: SenderField) -> usize {
    let Some(fields_len) = read_u32(message, 12) else { return 0 };
    // Fields start 8-aligned, so the span up to the next one (or to the body) is a multiple of 8 and everything
    // after it keeps its alignment.
    let span = align8(sender.value_end) - sender.at;
    let new_len = if sender.last { sender.previous_end - PRIMARY_HEADER } else { fields_len as usize - span };
    message.copy_within(0..sender.at, span);
    let header = &mut message[span..];
    let new_len = new_len as u32;
    let bytes = if header[0] == b'l' { new_len.to_le_bytes() } else { new_len.to_be_bytes() };
    header[12..16].copy_from_slice(&bytes);
    span
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let raw: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
    match bytes.first()? {
        b'l' => Some(u32::from_le_bytes(raw)),
        b'B' => Some(u32::from_be_bytes(raw)),
        _ => None,
    }
}

fn align8(at: usize) -> usize {
    (at + 7) & !7
}

fn align4(at: usize) -> usize {
    (at + 3) & !3
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of `message` as systemd sends them on its private socket: its sender (a 24-byte unique name
    /// here) replaced by `org.freedesktop.systemd1`.
    fn as_systemd_sends(message: zbus::Message) -> Vec<u8> {
        let mut bytes = message.data().to_vec();
        let stand_in = b":aaaaaaa.bbbbbbb.ccccccc";
        assert_eq!(stand_in.len(), SYSTEMD_SENDER.len());
        let at = bytes.windows(stand_in.len()).position(|w| w == stand_in).expect("the sender is in the header");
        bytes[at..at + stand_in.len()].copy_from_slice(SYSTEMD_SENDER);
        bytes
    }

    fn parse(bytes: Vec<u8>) -> zbus::Result<zbus::Message> {
        let data = zbus::wire::serialized::Data::new(bytes, zbus::wire::serialized::Context::new(zbus::wire::LE, 0));
        // SAFETY: the bytes are a message zbus itself serialized, with one header field taken out.
        unsafe { zbus::Message::from_bytes(data) }
    }

    fn signal(body: bool) -> zbus::Message {
        let builder =
            zbus::Message::signal("/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager", "JobRemoved")
                .sender(":aaaaaaa.bbbbbbb.ccccccc");
        if body {
            let path = zbus::ObjectPath::try_from("/org/freedesktop/systemd1/job/7").unwrap();
            builder.build(&(7u32, path, "a.service", "org.freedesktop.systemd1")).unwrap()
        } else {
            builder.build(&()).unwrap()
        }
    }

    #[test]
    fn systemds_sender_is_refused_as_it_comes_and_taken_out_before_zbus_reads_it() {
        for body in [true, false] {
            let mut bytes = as_systemd_sends(signal(body));
            assert!(parse(bytes.clone()).is_err(), "zbus takes org.freedesktop.systemd1 as a sender (body: {body})");
            assert_eq!(message_length(&bytes).unwrap(), Some(bytes.len()));
            let start = admit(&mut bytes, &|_, _| true).expect("a signal followed");
            assert!(start > 0 && start % 8 == 0, "the sender field's span, 8-aligned: {start}");
            let stripped = bytes[start..].to_vec();
            assert_eq!(message_length(&stripped).unwrap(), Some(stripped.len()), "the length still frames it");
            let message = parse(stripped).unwrap_or_else(|e| panic!("zbus refused the stripped message: {e}"));
            let header = message.header();
            assert_eq!(header.sender(), None);
            assert_eq!(header.member().map(|m| m.as_str()), Some("JobRemoved"));
            assert_eq!(header.path().map(|p| p.as_str()), Some("/org/freedesktop/systemd1"));
            if body {
                let body = message.body();
                let (id, job, unit, result): (u32, zbus::ObjectPath<'_>, String, String) = body.deserialize().unwrap();
                assert_eq!((id, job.as_str(), unit.as_str()), (7, "/org/freedesktop/systemd1/job/7", "a.service"));
                // The same text in the body is no sender: it stays.
                assert_eq!(result, "org.freedesktop.systemd1");
            }
        }
    }

    #[test]
    fn a_message_without_systemds_sender_is_left_as_it_is() {
        let message = zbus::Message::method_return(&signal(false).header()).build(&("x",)).unwrap();
        let mut bytes = message.data().to_vec();
        let before = bytes.clone();
        assert_eq!(admit(&mut bytes, &|_, _| false), Some(0), "a reply is never dropped");
        assert_eq!(bytes, before);
        assert_eq!(admit(&mut [b'l', 0, 0], &|_, _| false), Some(0), "too short to walk: zbus judges it");
    }

    #[test]
    fn framing_needs_the_primary_header_and_refuses_oversized_or_unmarked_messages() {
        assert_eq!(message_length(&[b'l'; 15]).unwrap(), None);
        let mut header = [0u8; 16];
        header[0] = b'l';
        header[4..8].copy_from_slice(&10u32.to_le_bytes());
        header[12..16].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(message_length(&header).unwrap(), Some(24 + 10));
        header[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(message_length(&header).unwrap_err().to_string().contains("bytes"));
        header[0] = b'x';
        assert!(message_length(&header).unwrap_err().to_string().contains("endianness"));
    }

    #[test]
    fn a_signal_nobody_follows_is_dropped_on_arrival() {
        let mut bytes = as_systemd_sends(signal(true));
        let seen = std::cell::RefCell::new(None);
        let follows = |path: &str, member: &str| {
            *seen.borrow_mut() = Some((path.to_owned(), member.to_owned()));
            false
        };
        assert_eq!(admit(&mut bytes, &follows), None);
        let seen = seen.take().expect("the filter was asked");
        assert_eq!(seen, ("/org/freedesktop/systemd1".to_owned(), "JobRemoved".to_owned()));
    }
}
