//! A control connection after its handshake: the protocol version both ends speak and, when a
//! secret is set, the keys that seal every frame written and open every frame read
//! ([`super::seal`]). Both the sender and the sink write and read through one of these, so no
//! frame after the handshake can bypass its seal.

use std::io::{self, Read, Write};

use super::frame::{FrameError, FrameReader, encode_with};
use super::msg::Message;
use super::seal::{ChannelKeys, DirectionKey};

/// One end of an established control connection.
pub(crate) struct Channel {
    version: u8,
    write_key: Option<DirectionKey>,
    reader: FrameReader,
}

impl Channel {
    /// A channel speaking `version`, sealed with `keys` if given (plain otherwise).
    pub(crate) fn new(version: u8, keys: Option<ChannelKeys>) -> Channel {
        let (write_key, read_key) = match keys {
            Some(k) => (Some(k.write), Some(k.read)),
            None => (None, None),
        };
        Channel {
            version,
            write_key,
            reader: FrameReader::opening(read_key),
        }
    }

    /// The protocol version every frame is written in.
    pub(crate) fn version(&self) -> u8 {
        self.version
    }

    /// Writes `msg` as one (sealed) frame, then flushes.
    pub(crate) fn send<W: Write + ?Sized>(&mut self, w: &mut W, msg: &Message) -> io::Result<()> {
        w.write_all(&encode_with(msg, self.version, self.write_key.as_mut())?)?;
        w.flush()
    }

    /// The next frame, `Ok(None)` when a read timed out first (no bytes are lost).
    pub(crate) fn poll<R: Read + ?Sized>(
        &mut self,
        r: &mut R,
    ) -> Result<Option<Message>, FrameError> {
        self.reader.poll(r)
    }

    /// The next frame; a read timeout is [`FrameError::Timeout`].
    pub(crate) fn recv<R: Read + ?Sized>(&mut self, r: &mut R) -> Result<Message, FrameError> {
        self.poll(r)?.ok_or(FrameError::Timeout)
    }

    /// Bytes read but not yet returned as a frame.
    pub(crate) fn buffered(&self) -> usize {
        self.reader.buffered()
    }
}
