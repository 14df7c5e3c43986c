//! What the tool prints and how it fails: lines to stdout that end quietly
//! when the reader goes away, one-line errors with their exit code, and
//! bytes, times and durations as people read them.

use idemkv::Error;
use std::fmt::{Display, Write as _};
use std::io::{self, Write as _};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Exit code of a command that found damage.
pub const EXIT_DAMAGE: u8 = 1;
/// Exit code of a usage error or any other failure.
pub const EXIT_OTHER: u8 = 2;

/// A command that failed: its one-line message and exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    /// A usage error or any other failure (exit 2).
    pub fn other(message: impl Into<String>) -> Self {
        Failure { code: EXIT_OTHER, message: message.into() }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        match &error {
            Error::Corruption { .. } => Failure { code: EXIT_DAMAGE, message: error.to_string() },
            Error::Io { operation, path, source } => Failure::other(io_message(operation, path, source)),
            _ => Failure::other(error.to_string()),
        }
    }
}

/// An I/O failure said the way a user can act on it.
pub fn io_message(operation: &str, path: &Path, source: &io::Error) -> String {
    match source.kind() {
        io::ErrorKind::PermissionDenied => {
            format!("permission denied: this user may not {operation} {}", path.display())
        }
        io::ErrorKind::NotADirectory if operation == "list" => format!("{} is not a directory", path.display()),
        io::ErrorKind::NotFound => format!("{} does not exist", path.display()),
        _ => format!("cannot {operation} {}: {source}", path.display()),
    }
}

/// Writes lines to stdout. A reader that went away (`idemkv list DIR |
/// head -1`) ends the output quietly: later lines are dropped, the command
/// goes on to its own exit code. Any other failure to write is an error.
#[derive(Debug, Default)]
pub struct Out {
    closed: bool,
}

impl Out {
    pub fn line(&mut self, text: impl Display) -> Result<(), Failure> {
        if self.closed {
            return Ok(());
        }
        match writeln!(io::stdout().lock(), "{text}") {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            Err(error) => Err(Failure::other(format!("writing to stdout: {error}"))),
        }
    }

    /// Whether the reader went away: nothing more is worth computing.
    pub fn is_closed(&self) -> bool {
        self.closed
    }
}

/// One line to stderr, `idemkv: ` first; a closed stderr is ignored (the
/// exit code still tells).
pub fn warn(message: &str) {
    let _ignored = writeln!(io::stderr().lock(), "idemkv: {message}");
}

/// `bytes` as text if it is UTF-8, else as hex.
pub fn text_or_hex(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_string(),
        Err(_) => bytes.iter().fold(String::from("0x"), |mut hex, byte| {
            let _infallible = write!(hex, "{byte:02x}");
            hex
        }),
    }
}

/// A byte count in binary units, with the exact count: `25.3 MiB
/// (26528000 bytes)`.
pub fn bytes(count: u64) -> String {
    if count < 1024 {
        return format!("{count} B");
    }
    format!("{} ({count} bytes)", bytesize::ByteSize::b(count).display().iec())
}

/// Milliseconds since the epoch as an RFC 3339 time in UTC, to the
/// millisecond (`2026-11-01T09:30:12.345Z`).
pub fn time(ms: u64) -> String {
    // RFC 3339 has four-digit years.
    const YEAR_10000_MS: u64 = 253_402_300_800_000;
    match UNIX_EPOCH.checked_add(Duration::from_millis(ms)) {
        Some(time) if ms < YEAR_10000_MS => humantime::format_rfc3339_millis(time).to_string(),
        _ => format!("{ms} ms after the epoch"),
    }
}

/// The wall clock in milliseconds since the epoch.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

/// How far `ms` is from now, to the second: `in 23h 59m 12s`, `5m 3s ago`.
pub fn relative(ms: u64, now_ms: u64) -> String {
    if ms >= now_ms {
        format!("in {}", seconds(ms - now_ms))
    } else {
        format!("{} ago", seconds(now_ms - ms))
    }
}

/// A span of milliseconds to the second, as `1h 2m 3s` (`0s` under one).
fn seconds(ms: u64) -> String {
    humantime::format_duration(Duration::from_secs(ms / 1000)).to_string()
}

/// A latency with three significant digits and its unit: `512 µs`,
/// `1.25 ms`, `87 ns`.
pub fn latency(nanos: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "three significant digits are shown")]
    let value = nanos as f64;
    let (scaled, unit) = match nanos {
        0..1_000 => return format!("{nanos} ns"),
        1_000..1_000_000 => (value / 1e3, "µs"),
        1_000_000..1_000_000_000 => (value / 1e6, "ms"),
        _ => (value / 1e9, "s"),
    };
    let decimals = if scaled >= 100.0 {
        0
    } else if scaled >= 10.0 {
        1
    } else {
        2
    };
    format!("{scaled:.decimals$} {unit}")
}

/// A count with thousands separators: `3,260,114`.
pub fn count(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(bytes(12), "12 B");
        assert_eq!(bytes(1536), "1.5 KiB (1536 bytes)");
        assert_eq!(time(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(time(u64::MAX), format!("{} ms after the epoch", u64::MAX));
        assert_eq!(relative(5_000, 1_000), "in 4s");
        assert_eq!(relative(1_000, 3_723_000), "1h 2m 2s ago");
        assert_eq!(latency(87), "87 ns");
        assert_eq!(latency(512_300), "512 µs");
        assert_eq!(latency(1_250_000), "1.25 ms");
        assert_eq!(latency(12_500_000_000), "12.5 s");
        assert_eq!(count(3_260_114), "3,260,114");
        assert_eq!(count(999), "999");
        assert_eq!(text_or_hex(&[0xff, 0x01]), "0xff01");
    }
}
