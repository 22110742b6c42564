//! Wire codec of the NRI socket, with no I/O.
//!
//! NRI v0.2+ runs two ttrpc connections over one unix socket: every chunk on
//! the socket is a multiplexer frame `[u32 conn id][u32 length][bytes]`
//! (big endian). Connection 1 carries the Plugin service (the runtime calls
//! the plugin), connection 2 the Runtime service (the plugin calls the
//! runtime). Each connection is a ttrpc byte stream of messages
//! `[u32 length][u32 stream id][u8 type][u8 flags][payload]` whose payload is a
//! `ttrpc.Request` or `ttrpc.Response`. Mux frames may split or join ttrpc
//! messages arbitrarily, so each connection keeps its own reassembly buffer.

use std::collections::HashMap;

/// Connection id of the Plugin service (requests from the runtime).
pub const PLUGIN_CONN: u32 = 1;
/// Connection id of the Runtime service (requests from the plugin).
pub const RUNTIME_CONN: u32 = 2;
/// Bytes of a multiplexer frame header.
pub const MUX_HEADER_LEN: usize = 8;
/// Bytes of a ttrpc message header.
pub const TTRPC_HEADER_LEN: usize = 10;
/// ttrpc's limit on one message payload (4 MiB).
pub const MAX_MESSAGE_LEN: usize = 4 << 20;
/// Largest multiplexer frame accepted: one whole ttrpc message.
pub const MAX_MUX_FRAME_LEN: usize = MAX_MESSAGE_LEN + TTRPC_HEADER_LEN;

/// The ttrpc message kinds (`type` byte of the header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    Request,
    Response,
    Data,
}

impl MessageKind {
    pub fn as_byte(self) -> u8 {
        match self {
            MessageKind::Request => 1,
            MessageKind::Response => 2,
            MessageKind::Data => 3,
        }
    }

    pub fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(MessageKind::Request),
            2 => Some(MessageKind::Response),
            3 => Some(MessageKind::Data),
            _ => None,
        }
    }
}

/// One ttrpc message received on a multiplexed connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub conn: u32,
    pub stream_id: u32,
    pub kind: MessageKind,
    pub flags: u8,
    pub payload: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error(
        "NRI multiplexer frame for connection {conn} announces {length} bytes (limit {MAX_MUX_FRAME_LEN})"
    )]
    MuxFrameTooLarge { conn: u32, length: usize },
    #[error("NRI multiplexer frame for unknown connection {conn} (expected 1 or 2)")]
    UnknownConnection { conn: u32 },
    #[error(
        "ttrpc message on connection {conn} announces {length} bytes (limit {MAX_MESSAGE_LEN})"
    )]
    MessageTooLarge { conn: u32, length: usize },
    #[error("ttrpc message on connection {conn}, stream {stream_id} has unknown type {kind}")]
    UnknownMessageType { conn: u32, stream_id: u32, kind: u8 },
}

/// Appends one ttrpc message, wrapped in a multiplexer frame, to `out`.
pub fn encode_message(
    conn: u32,
    stream_id: u32,
    kind: MessageKind,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), FrameError> {
    if payload.len() > MAX_MESSAGE_LEN {
        return Err(FrameError::MessageTooLarge {
            conn,
            length: payload.len(),
        });
    }
    // Both lengths fit in u32: payload is at most 4 MiB.
    let message_len = (TTRPC_HEADER_LEN + payload.len()) as u32;
    out.reserve(MUX_HEADER_LEN + message_len as usize);
    out.extend_from_slice(&conn.to_be_bytes());
    out.extend_from_slice(&message_len.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&stream_id.to_be_bytes());
    out.push(kind.as_byte());
    out.push(0);
    out.extend_from_slice(payload);
    Ok(())
}

/// Reassembles ttrpc messages from socket bytes fed in arbitrary chunks.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    socket: Vec<u8>,
    connections: HashMap<u32, Vec<u8>>,
}

impl FrameDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds bytes read from the socket.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.socket.extend_from_slice(bytes);
    }

    /// The next complete message, `Ok(None)` when more bytes are needed.
    /// An error means the stream is corrupt; the connection must be dropped.
    pub fn next_message(&mut self) -> Result<Option<Message>, FrameError> {
        loop {
            // A message already complete on some connection goes first.
            for (&conn, buffer) in self.connections.iter_mut() {
                if let Some(message) = take_message(conn, buffer)? {
                    return Ok(Some(message));
                }
            }
            if !self.unwrap_mux_frame()? {
                return Ok(None);
            }
        }
    }

    /// Moves one complete multiplexer frame into its connection buffer.
    fn unwrap_mux_frame(&mut self) -> Result<bool, FrameError> {
        if self.socket.len() < MUX_HEADER_LEN {
            return Ok(false);
        }
        let conn = be_u32(&self.socket[0..4]);
        let length = be_u32(&self.socket[4..8]) as usize;
        if conn != PLUGIN_CONN && conn != RUNTIME_CONN {
            return Err(FrameError::UnknownConnection { conn });
        }
        if length > MAX_MUX_FRAME_LEN {
            return Err(FrameError::MuxFrameTooLarge { conn, length });
        }
        if self.socket.len() < MUX_HEADER_LEN + length {
            return Ok(false);
        }
        let buffer = self.connections.entry(conn).or_default();
        buffer.extend_from_slice(&self.socket[MUX_HEADER_LEN..MUX_HEADER_LEN + length]);
        self.socket.drain(..MUX_HEADER_LEN + length);
        Ok(true)
    }
}

fn take_message(conn: u32, buffer: &mut Vec<u8>) -> Result<Option<Message>, FrameError> {
    if buffer.len() < TTRPC_HEADER_LEN {
        return Ok(None);
    }
    let length = be_u32(&buffer[0..4]) as usize;
    let stream_id = be_u32(&buffer[4..8]);
    if length > MAX_MESSAGE_LEN {
        return Err(FrameError::MessageTooLarge { conn, length });
    }
    let kind = MessageKind::from_byte(buffer[8]).ok_or(FrameError::UnknownMessageType {
        conn,
        stream_id,
        kind: buffer[8],
    })?;
    if buffer.len() < TTRPC_HEADER_LEN + length {
        return Ok(None);
    }
    let flags = buffer[9];
    let payload = buffer[TTRPC_HEADER_LEN..TTRPC_HEADER_LEN + length].to_vec();
    buffer.drain(..TTRPC_HEADER_LEN + length);
    Ok(Some(Message {
        conn,
        stream_id,
        kind,
        flags,
        payload,
    }))
}

fn be_u32(bytes: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[..4]);
    u32::from_be_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(decoder: &mut FrameDecoder) -> Vec<Message> {
        let mut out = Vec::new();
        while let Some(message) = decoder.next_message().unwrap() {
            out.push(message);
        }
        out
    }

    #[test]
    fn header_layout_matches_the_wire_format() {
        let mut out = Vec::new();
        encode_message(RUNTIME_CONN, 7, MessageKind::Request, b"abc", &mut out).unwrap();
        assert_eq!(
            out,
            [
                0, 0, 0, 2, // conn
                0, 0, 0, 13, // mux length = 10 + 3
                0, 0, 0, 3, // ttrpc length
                0, 0, 0, 7, // stream id
                1, 0, // request, no flags
                b'a', b'b', b'c'
            ]
        );
    }

    #[test]
    fn messages_split_byte_by_byte_are_reassembled_per_connection() {
        let mut bytes = Vec::new();
        encode_message(PLUGIN_CONN, 1, MessageKind::Request, b"first", &mut bytes).unwrap();
        encode_message(RUNTIME_CONN, 1, MessageKind::Response, b"", &mut bytes).unwrap();
        encode_message(PLUGIN_CONN, 3, MessageKind::Request, &[9; 300], &mut bytes).unwrap();
        let mut decoder = FrameDecoder::new();
        let mut messages = Vec::new();
        for byte in &bytes {
            decoder.feed(std::slice::from_ref(byte));
            messages.extend(drain(&mut decoder));
        }
        assert_eq!(messages.len(), 3);
        let plugin: Vec<_> = messages.iter().filter(|m| m.conn == PLUGIN_CONN).collect();
        assert_eq!(plugin[0].payload, b"first");
        assert_eq!(plugin[1].stream_id, 3);
        assert_eq!(plugin[1].payload.len(), 300);
        let runtime: Vec<_> = messages.iter().filter(|m| m.conn == RUNTIME_CONN).collect();
        assert_eq!(runtime[0].kind, MessageKind::Response);
        assert!(runtime[0].payload.is_empty());
    }

    #[test]
    fn one_ttrpc_message_spread_over_several_mux_frames_is_joined() {
        let mut whole = Vec::new();
        encode_message(
            PLUGIN_CONN,
            5,
            MessageKind::Request,
            b"0123456789",
            &mut whole,
        )
        .unwrap();
        let message = &whole[MUX_HEADER_LEN..];
        let mut bytes = Vec::new();
        for chunk in message.chunks(4) {
            bytes.extend_from_slice(&PLUGIN_CONN.to_be_bytes());
            bytes.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
            bytes.extend_from_slice(chunk);
        }
        let mut decoder = FrameDecoder::new();
        decoder.feed(&bytes);
        let messages = drain(&mut decoder);
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].payload, b"0123456789");
        assert_eq!(messages[0].stream_id, 5);
    }

    #[test]
    fn malformed_headers_are_typed_errors() {
        let mut decoder = FrameDecoder::new();
        decoder.feed(&[0, 0, 0, 9, 0, 0, 0, 1, 0]);
        assert_eq!(
            decoder.next_message(),
            Err(FrameError::UnknownConnection { conn: 9 })
        );

        let mut decoder = FrameDecoder::new();
        decoder.feed(&[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(
            decoder.next_message(),
            Err(FrameError::MuxFrameTooLarge { conn: 1, .. })
        ));

        let mut decoder = FrameDecoder::new();
        let mut bytes = vec![0, 0, 0, 1, 0, 0, 0, 10];
        bytes.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1, 42, 0]);
        decoder.feed(&bytes);
        assert_eq!(
            decoder.next_message(),
            Err(FrameError::UnknownMessageType {
                conn: 1,
                stream_id: 1,
                kind: 42
            })
        );

        let mut decoder = FrameDecoder::new();
        let mut bytes = vec![0, 0, 0, 2, 0, 0, 0, 10];
        bytes.extend_from_slice(&[0x7f, 0, 0, 0, 0, 0, 0, 1, 1, 0]);
        decoder.feed(&bytes);
        assert!(matches!(
            decoder.next_message(),
            Err(FrameError::MessageTooLarge { conn: 2, .. })
        ));
    }

    #[test]
    fn oversized_payloads_are_refused_when_encoding() {
        let mut out = Vec::new();
        let big = vec![0u8; MAX_MESSAGE_LEN + 1];
        assert!(encode_message(PLUGIN_CONN, 1, MessageKind::Response, &big, &mut out).is_err());
        assert!(out.is_empty());
    }
}
