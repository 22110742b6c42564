//! A small protobuf wire-format reader and writer: enough to walk encoded
//! messages field by field without knowing their Rust types.

/// The encodings a field may use (groups are rejected as malformed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireType {
    Varint,
    Fixed64,
    Len,
    Fixed32,
}

impl WireType {
    fn code(self) -> u64 {
        match self {
            WireType::Varint => 0,
            WireType::Fixed64 => 1,
            WireType::Len => 2,
            WireType::Fixed32 => 5,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("the message ends inside a field")]
    Truncated,
    #[error("a varint is longer than 10 bytes")]
    VarintTooLong,
    #[error("field number {0} is out of range")]
    FieldNumber(u64),
    #[error("field {field} uses the group encoding")]
    Group { field: u32 },
    #[error("field {field} has the invalid wire type {wire_type}")]
    InvalidWireType { field: u32, wire_type: u64 },
    #[error("messages are nested deeper than {0} levels")]
    TooDeep(usize),
}

/// One encoded field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireField<'a> {
    pub number: u32,
    pub wire_type: WireType,
    /// The whole field: tag, length prefix (if any) and value.
    pub raw: &'a [u8],
    /// The value: the payload of a length-delimited field, else the value bytes.
    pub value: &'a [u8],
}

/// The highest field number protobuf allows.
pub const MAX_FIELD_NUMBER: u64 = (1 << 29) - 1;

/// Reads a varint at `*pos`, advancing it.
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Result<u64, WireError> {
    let mut value = 0u64;
    for index in 0..10 {
        let byte = *buf.get(*pos).ok_or(WireError::Truncated)?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << (7 * index);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(WireError::VarintTooLong)
}

fn take<'a>(buf: &'a [u8], pos: &mut usize, len: u64) -> Result<&'a [u8], WireError> {
    let len = usize::try_from(len).map_err(|_| WireError::Truncated)?;
    let end = pos.checked_add(len).ok_or(WireError::Truncated)?;
    let bytes = buf.get(*pos..end).ok_or(WireError::Truncated)?;
    *pos = end;
    Ok(bytes)
}

/// Iterates over the fields of one encoded message; stops after the first error.
pub struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    failed: bool,
}

/// The fields of the encoded message `buf`, in order.
pub fn fields(buf: &[u8]) -> Fields<'_> {
    Fields {
        buf,
        pos: 0,
        failed: false,
    }
}

impl<'a> Fields<'a> {
    fn read_field(&mut self) -> Result<WireField<'a>, WireError> {
        let start = self.pos;
        let tag = read_varint(self.buf, &mut self.pos)?;
        let number = tag >> 3;
        if number == 0 || number > MAX_FIELD_NUMBER {
            return Err(WireError::FieldNumber(number));
        }
        // In range, checked above.
        let number = number as u32;
        let (wire_type, value) = match tag & 7 {
            0 => {
                let value_start = self.pos;
                read_varint(self.buf, &mut self.pos)?;
                (WireType::Varint, &self.buf[value_start..self.pos])
            }
            1 => (WireType::Fixed64, take(self.buf, &mut self.pos, 8)?),
            2 => {
                let len = read_varint(self.buf, &mut self.pos)?;
                (WireType::Len, take(self.buf, &mut self.pos, len)?)
            }
            5 => (WireType::Fixed32, take(self.buf, &mut self.pos, 4)?),
            3 | 4 => return Err(WireError::Group { field: number }),
            other => {
                return Err(WireError::InvalidWireType {
                    field: number,
                    wire_type: other,
                });
            }
        };
        Ok(WireField {
            number,
            wire_type,
            raw: &self.buf[start..self.pos],
            value,
        })
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<WireField<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let field = self.read_field();
        self.failed = field.is_err();
        Some(field)
    }
}

pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

pub fn put_tag(out: &mut Vec<u8>, number: u32, wire_type: WireType) {
    put_varint(out, (u64::from(number) << 3) | wire_type.code());
}

/// Writes a length-delimited field.
pub fn put_len_field(out: &mut Vec<u8>, number: u32, payload: &[u8]) {
    put_tag(out, number, WireType::Len);
    put_varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_reject_overlong_input() {
        for value in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            let mut pos = 0;
            assert_eq!(read_varint(&out, &mut pos), Ok(value));
            assert_eq!(pos, out.len());
        }
        assert_eq!(
            read_varint(&[0x80; 11], &mut 0),
            Err(WireError::VarintTooLong)
        );
        assert_eq!(read_varint(&[0x80], &mut 0), Err(WireError::Truncated));
    }

    #[test]
    fn walks_every_wire_type() {
        let mut message = Vec::new();
        put_tag(&mut message, 1, WireType::Varint);
        put_varint(&mut message, 150);
        put_tag(&mut message, 2, WireType::Fixed64);
        message.extend_from_slice(&7u64.to_le_bytes());
        put_len_field(&mut message, 3, b"abc");
        put_tag(&mut message, 4, WireType::Fixed32);
        message.extend_from_slice(&9u32.to_le_bytes());
        let walked: Vec<_> = fields(&message).collect::<Result<_, _>>().unwrap();
        let shape: Vec<_> = walked.iter().map(|f| (f.number, f.wire_type)).collect();
        assert_eq!(
            shape,
            [
                (1, WireType::Varint),
                (2, WireType::Fixed64),
                (3, WireType::Len),
                (4, WireType::Fixed32)
            ]
        );
        assert_eq!(walked[0].raw, [0x08, 0x96, 0x01]);
        assert_eq!(walked[2].value, b"abc");
        assert_eq!(walked[2].raw, [0x1a, 3, b'a', b'b', b'c']);
        let total: usize = walked.iter().map(|f| f.raw.len()).sum();
        assert_eq!(total, message.len());
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let cases: [(&[u8], WireError); 6] = [
            (&[0x0b], WireError::Group { field: 1 }),
            (&[0x0c], WireError::Group { field: 1 }),
            (
                &[0x0e],
                WireError::InvalidWireType {
                    field: 1,
                    wire_type: 6,
                },
            ),
            (&[0x00, 0x01], WireError::FieldNumber(0)),
            (&[0x1a, 0x05, b'a'], WireError::Truncated),
            (&[0x09, 1, 2, 3], WireError::Truncated),
        ];
        for (bytes, expected) in cases {
            let result: Result<Vec<_>, _> = fields(bytes).collect();
            assert_eq!(result.unwrap_err(), expected, "{bytes:?}");
        }
        // A huge length prefix must not overflow.
        let mut huge = vec![0x1a];
        put_varint(&mut huge, u64::MAX);
        assert_eq!(fields(&huge).last(), Some(Err(WireError::Truncated)));
        // The iterator stops after an error.
        assert_eq!(fields(&[0x0b, 0x08, 0x01]).count(), 1);
    }
}
