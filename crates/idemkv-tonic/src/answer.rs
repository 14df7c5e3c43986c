//! The kept answer of a unary call — what a retry gets back — in a byte
//! layout of its own, stored as the record's response on any backend.
//!
//! ```text
//! offset  size  field
//! 0       1     format version (VERSION)
//! 1       1     kind: KIND_MESSAGE (the call answered a message) or
//!               KIND_STATUS (it answered an error status)
//! 2       1     flags: FLAG_BODY_OMITTED (the message, or the status's
//!               message and details, not kept for its size),
//!               FLAG_METADATA_OMITTED (the metadata not kept either)
//! 3       ..    KIND_MESSAGE: u32 length + the encoded message
//!               KIND_STATUS:  i32 code, u32 length + message (UTF-8),
//!                             u32 length + details
//! ..      ..    u32 count of metadata entries, each u32 length + name,
//!               u32 length + value (as on the wire: `-bin` values in
//!               base64)
//! ```
//!
//! Integers are little-endian and fixed-width; every length comes before
//! its bytes. A message's metadata is its response's (HTTP/2 headers); a
//! status's is its own (trailers). Decoding checks every length against
//! what is left and refuses trailing bytes: stored bytes that are no
//! answer of this layout are an [`AnswerError`], never a panic.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use tonic::metadata::{KeyAndValueRef, MetadataMap};

/// The layout's version.
const VERSION: u8 = 1;
/// The call answered a message.
const KIND_MESSAGE: u8 = 0;
/// The call answered an error status.
const KIND_STATUS: u8 = 1;
/// The body (message; or a status's message and details) was not kept.
const FLAG_BODY_OMITTED: u8 = 0b01;
/// The metadata was not kept.
const FLAG_METADATA_OMITTED: u8 = 0b10;
/// Version, kind and flags.
const HEADER_BYTES: usize = 3;

/// A kept answer that cannot be read: bytes under the key that this
/// layout did not write (or that were damaged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// A length runs past the end.
    #[error("kept answer truncated at byte {offset}")]
    Truncated {
        /// Where the missing bytes were expected.
        offset: usize,
    },
    /// A version this build does not read.
    #[error("kept answer of unknown format version {version}")]
    UnknownVersion {
        /// The version read.
        version: u8,
    },
    /// A kind this build does not know.
    #[error("kept answer of unknown kind {kind}")]
    UnknownKind {
        /// The kind read.
        kind: u8,
    },
    /// A status message that is not UTF-8, or metadata that is no header.
    #[error("kept answer has an invalid {field} at byte {offset}")]
    Invalid {
        /// What was invalid.
        field: &'static str,
        /// Where.
        offset: usize,
    },
    /// Bytes after the last field.
    #[error("kept answer has {extra} trailing bytes")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
    /// The stored message does not decode as the method's response type.
    #[error("kept message does not decode: {0}")]
    Message(#[from] prost::DecodeError),
}

/// What a call answered, read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Body {
    /// A message, encoded.
    Message(Bytes),
    /// An error status.
    Status {
        /// `tonic::Code` as its number.
        code: i32,
        message: String,
        details: Bytes,
    },
}

/// A kept answer, read back.
#[derive(Debug, Clone)]
pub(crate) struct Kept {
    pub body: Body,
    /// Whether the body was not kept for its size (the call succeeded or
    /// failed as `body` says, but its message or details are not here).
    pub omitted: bool,
    pub metadata: MetadataMap,
}

/// The kept form of a message answer (`message` encoded) with its
/// response `metadata`, within `budget` bytes where it can be: the whole
/// answer, else without the message, else without the metadata too.
pub(crate) fn encode_message(message: &[u8], metadata: &MetadataMap, budget: usize) -> Vec<u8> {
    // Version, kind and flags; the message's length.
    let bare = HEADER_BYTES + 4;
    let (flags, size) = form(budget, bare, kept(message.len()), metadata_size(metadata));
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&[VERSION, KIND_MESSAGE, flags]);
    put_bytes(&mut out, if flags & FLAG_BODY_OMITTED == 0 { message } else { &[] });
    put_metadata(&mut out, (flags & FLAG_METADATA_OMITTED == 0).then_some(metadata));
    out
}

/// The kept form of an error `status` (code, message, details and its
/// metadata), within `budget` bytes where it can be, as
/// [`encode_message`].
pub(crate) fn encode_status(status: &tonic::Status, budget: usize) -> Vec<u8> {
    let (message, details) = (status.message().as_bytes(), status.details());
    // Version, kind and flags; the code; the message's and details' lengths.
    let bare = HEADER_BYTES + 4 + 4 + 4;
    let body = kept(message.len()).saturating_add(kept(details.len()));
    let (flags, size) = form(budget, bare, body, metadata_size(status.metadata()));
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&[VERSION, KIND_STATUS, flags]);
    out.extend_from_slice(&i32::from(status.code()).to_le_bytes());
    let (message, details) = if flags & FLAG_BODY_OMITTED == 0 { (message, details) } else { (&[][..], &[][..]) };
    put_bytes(&mut out, message);
    put_bytes(&mut out, details);
    put_metadata(&mut out, (flags & FLAG_METADATA_OMITTED == 0).then_some(status.metadata()));
    out
}

/// The flags and size of the first of the whole answer, the answer
/// without its body, and the answer without body or metadata that fits
/// `budget`; the last if none does (the backend then refuses it for its
/// size). Without body or metadata the answer is its `bare` fields and
/// the metadata's count; its body adds `body` bytes, its metadata's
/// entries `metadata`.
fn form(budget: usize, bare: usize, body: usize, metadata: usize) -> (u8, usize) {
    let bare = bare + 4; // the metadata's count
    let without_body = bare.saturating_add(metadata);
    let whole = without_body.saturating_add(body);
    if whole <= budget {
        (0, whole)
    } else if without_body <= budget {
        (FLAG_BODY_OMITTED, without_body)
    } else {
        (FLAG_BODY_OMITTED | FLAG_METADATA_OMITTED, bare)
    }
}

/// The most bytes (or entries) one length says.
const LENGTH_MAX: usize = u32::MAX as usize;

/// How many of `length` bytes [`put_bytes`] keeps.
fn kept(length: usize) -> usize {
    length.min(LENGTH_MAX)
}

/// Appends `bytes` with their length. Lengths over `u32::MAX` do not
/// arise (a backend keeps far less); were one to, it would be cut there,
/// and the backend refuse the answer for its size.
fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    let kept = &bytes[..kept(bytes.len())];
    out.extend_from_slice(&u32::try_from(kept.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(kept);
}

/// The entries of `metadata` that are kept, in its order: each name and
/// its value as on the wire (a `-bin` value in base64). Counts over
/// `u32::MAX` do not arise either; were one to, it would be cut there.
fn entries(metadata: &MetadataMap) -> impl Iterator<Item = (&[u8], &[u8])> {
    metadata.iter().take(LENGTH_MAX).map(|entry| match entry {
        KeyAndValueRef::Ascii(name, value) => (name.as_str().as_bytes(), value.as_encoded_bytes()),
        KeyAndValueRef::Binary(name, value) => (name.as_str().as_bytes(), value.as_encoded_bytes()),
    })
}

/// The bytes [`put_metadata`] writes for the entries of `metadata`
/// (their count not included).
fn metadata_size(metadata: &MetadataMap) -> usize {
    entries(metadata)
        .fold(0, |size, (name, value)| size.saturating_add(4 + kept(name.len())).saturating_add(4 + kept(value.len())))
}

/// Appends the count of `metadata`'s entries (0 when it is not kept),
/// then each entry.
fn put_metadata(out: &mut Vec<u8>, metadata: Option<&MetadataMap>) {
    let Some(metadata) = metadata else {
        out.extend_from_slice(&0u32.to_le_bytes());
        return;
    };
    let count = metadata.len().min(LENGTH_MAX);
    out.extend_from_slice(&u32::try_from(count).unwrap_or(u32::MAX).to_le_bytes());
    for (name, value) in entries(metadata) {
        put_bytes(out, name);
        put_bytes(out, value);
    }
}

/// Reads a kept answer.
///
/// # Errors
/// [`AnswerError`] for bytes this layout did not write.
pub(crate) fn decode(bytes: &[u8]) -> Result<Kept, AnswerError> {
    let mut reader = Reader { bytes, offset: 0 };
    let header = reader.take(HEADER_BYTES)?;
    let (version, kind, flags) = (header[0], header[1], header[2]);
    if version != VERSION {
        return Err(AnswerError::UnknownVersion { version });
    }
    let body = match kind {
        KIND_MESSAGE => Body::Message(Bytes::copy_from_slice(reader.length_prefixed()?)),
        KIND_STATUS => {
            let code = i32::from_le_bytes(reader.array()?);
            let at = reader.offset;
            let message = std::str::from_utf8(reader.length_prefixed()?)
                .map_err(|_| AnswerError::Invalid { field: "status message", offset: at })?
                .to_owned();
            let details = Bytes::copy_from_slice(reader.length_prefixed()?);
            Body::Status { code, message, details }
        }
        kind => return Err(AnswerError::UnknownKind { kind }),
    };
    let metadata = reader.metadata()?;
    let extra = bytes.len() - reader.offset;
    if extra > 0 {
        return Err(AnswerError::TrailingBytes { extra });
    }
    Ok(Kept { body, omitted: flags & FLAG_BODY_OMITTED != 0, metadata })
}

/// A cursor over stored bytes that checks every length.
struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, length: usize) -> Result<&'a [u8], AnswerError> {
        let end = self.offset.checked_add(length).filter(|end| *end <= self.bytes.len());
        let Some(end) = end else { return Err(AnswerError::Truncated { offset: self.offset }) };
        let taken = &self.bytes[self.offset..end];
        self.offset = end;
        Ok(taken)
    }

    fn array(&mut self) -> Result<[u8; 4], AnswerError> {
        let mut array = [0u8; 4];
        array.copy_from_slice(self.take(4)?);
        Ok(array)
    }

    fn length(&mut self) -> Result<usize, AnswerError> {
        let at = self.offset;
        usize::try_from(u32::from_le_bytes(self.array()?)).map_err(|_| AnswerError::Truncated { offset: at })
    }

    fn length_prefixed(&mut self) -> Result<&'a [u8], AnswerError> {
        let length = self.length()?;
        self.take(length)
    }

    fn metadata(&mut self) -> Result<MetadataMap, AnswerError> {
        let count = self.length()?;
        let mut headers = HeaderMap::new();
        // Each entry takes at least eight bytes: a count larger than what
        // is left is refused by the reads, never allocated for.
        for _ in 0..count {
            let at = self.offset;
            let invalid = |field| AnswerError::Invalid { field, offset: at };
            let name = HeaderName::from_bytes(self.length_prefixed()?).map_err(|_| invalid("metadata name"))?;
            let value = HeaderValue::from_bytes(self.length_prefixed()?).map_err(|_| invalid("metadata value"))?;
            headers.append(name, value);
        }
        Ok(MetadataMap::from_headers(headers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::{Code, Status};

    fn metadata() -> MetadataMap {
        let mut metadata = MetadataMap::new();
        metadata.insert("x-charge", "ch_1".parse().expect("ascii"));
        metadata.append("x-charge", "ch_2".parse().expect("ascii"));
        metadata.insert_bin("x-trace-bin", tonic::metadata::MetadataValue::from_bytes(&[0, 1, 2, 255]));
        metadata
    }

    #[test]
    fn a_message_and_its_metadata_read_back_as_written() {
        let encoded = encode_message(b"\x08\x2a", &metadata(), 1024);
        let kept = decode(&encoded).expect("decode");
        assert_eq!(kept.body, Body::Message(Bytes::from_static(b"\x08\x2a")));
        assert!(!kept.omitted);
        assert_eq!(kept.metadata.clone().into_headers(), metadata().into_headers());
    }

    #[test]
    fn a_status_reads_back_with_code_message_details_and_trailers() {
        let status = Status::with_details_and_metadata(
            Code::FailedPrecondition,
            "card declined",
            Bytes::from_static(b"\x0a\x03abc"),
            metadata(),
        );
        let kept = decode(&encode_status(&status, 1024)).expect("decode");
        let expected = Body::Status {
            code: i32::from(Code::FailedPrecondition),
            message: "card declined".into(),
            details: Bytes::from_static(b"\x0a\x03abc"),
        };
        assert_eq!(kept.body, expected);
        assert_eq!(kept.metadata.into_headers(), metadata().into_headers());
    }

    #[test]
    fn an_answer_over_the_budget_keeps_its_metadata_then_its_kind_alone() {
        let message = vec![7u8; 600];
        let without_body = decode(&encode_message(&message, &metadata(), 200)).expect("decode");
        assert!(without_body.omitted);
        assert_eq!(without_body.body, Body::Message(Bytes::new()));
        assert_eq!(without_body.metadata.len(), 3);
        let bare = decode(&encode_message(&message, &metadata(), 12)).expect("decode");
        assert!(bare.omitted);
        assert_eq!(bare.metadata.len(), 0);
    }

    /// `parts`, each after its length (u32, little-endian).
    fn prefixed(parts: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for part in parts {
            out.extend_from_slice(&u32::try_from(part.len()).expect("short").to_le_bytes());
            out.extend_from_slice(part);
        }
        out
    }

    /// `metadata()` as the layout writes it: the count, then each entry in
    /// the map's order, a `-bin` value in base64.
    fn metadata_bytes() -> Vec<u8> {
        let entries = prefixed(&[b"x-charge", b"ch_1", b"x-charge", b"ch_2", b"x-trace-bin", b"AAEC/w"]);
        [&3u32.to_le_bytes()[..], &entries].concat()
    }

    /// `forms` (whole, without body, bare) are what `encode` writes, and
    /// it writes the first that fits each budget, else the last.
    fn assert_forms(forms: &[Vec<u8>; 3], encode: impl Fn(usize) -> Vec<u8>) {
        for budget in 0..forms[0].len() + 2 {
            let expected = forms[..2].iter().find(|form| form.len() <= budget).unwrap_or(&forms[2]);
            assert_eq!(&encode(budget), expected, "budget {budget}");
        }
    }

    #[test]
    fn a_message_answer_is_written_byte_for_byte_in_the_first_form_that_fits() {
        let forms = [
            [&[1, 0, 0][..], &prefixed(&[b"\x08\x2a"]), &metadata_bytes()].concat(),
            [&[1, 0, 1][..], &prefixed(&[b""]), &metadata_bytes()].concat(),
            [&[1, 0, 3][..], &prefixed(&[b""]), &0u32.to_le_bytes()].concat(),
        ];
        assert_forms(&forms, |budget| encode_message(b"\x08\x2a", &metadata(), budget));
    }

    #[test]
    fn a_status_answer_is_written_byte_for_byte_in_the_first_form_that_fits() {
        let status = Status::with_details_and_metadata(
            Code::FailedPrecondition,
            "card declined",
            Bytes::from_static(b"\x0a\x03abc"),
            metadata(),
        );
        let code = 9i32.to_le_bytes();
        let forms = [
            [&[1, 1, 0][..], &code, &prefixed(&[b"card declined", b"\x0a\x03abc"]), &metadata_bytes()].concat(),
            [&[1, 1, 1][..], &code, &prefixed(&[b"", b""]), &metadata_bytes()].concat(),
            [&[1, 1, 3][..], &code, &prefixed(&[b"", b""]), &0u32.to_le_bytes()].concat(),
        ];
        assert_forms(&forms, |budget| encode_status(&status, budget));
    }

    #[test]
    fn every_cut_and_every_flipped_byte_is_an_error_or_an_answer_never_a_panic() {
        let status = Status::with_details_and_metadata(Code::Aborted, "x", Bytes::from_static(b"d"), metadata());
        let encoded = encode_status(&status, 1024);
        for cut in 0..encoded.len() {
            assert!(decode(&encoded[..cut]).is_err(), "a cut at {cut} read as an answer");
        }
        for at in 0..encoded.len() {
            for bit in 0..8 {
                let mut damaged = encoded.clone();
                damaged[at] ^= 1 << bit;
                let _answer_or_error = decode(&damaged);
            }
        }
        assert_eq!(
            decode(&[VERSION + 1, 0, 0]).expect_err("a newer version"),
            AnswerError::UnknownVersion { version: VERSION + 1 }
        );
        let mut trailing = encoded;
        trailing.push(0);
        assert_eq!(decode(&trailing).expect_err("trailing bytes"), AnswerError::TrailingBytes { extra: 1 });
    }
}
