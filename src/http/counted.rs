//! The counter of the layer's answers, `idempo_http_responses_total{outcome,
//! status}` (feature `metrics`), counted without allocating: each pair of
//! labels is made once, the first time an answer carries it, and the same
//! key serves every later answer. A service without a recorder pays a
//! lookup in a table and the recorder facade's no-op.

use http::Response;

/// Name of the counter of the layer's answers, by `outcome` and `status`.
#[cfg(feature = "metrics")]
pub(super) const RESPONSES_TOTAL: &str = "idempo_http_responses_total";

/// Counts one answer of the layer under `outcome` (what the layer decided)
/// and its status.
pub(super) fn counted<T>(outcome: &'static str, response: Response<T>) -> Response<T> {
    count(outcome, Some(response.status()));
    response
}

/// Counts one answer under `outcome` and `status`; `None` for no answer
/// but the handler's error, counted as status `error`.
#[cfg_attr(not(feature = "metrics"), expect(unused_variables, reason = "the labels are for the exporter"))]
pub(super) fn count(outcome: &'static str, status: Option<http::StatusCode>) {
    // The request's span: every answer the layer counts is made in one
    // (a guarded request's, or a resource write's without a key).
    tracing::Span::current().record("outcome", outcome);
    #[cfg(feature = "metrics")]
    exported::count(outcome, status);
}

#[cfg(feature = "metrics")]
mod exported {
    use super::RESPONSES_TOTAL;
    use metrics::{Key, Label, Level, Metadata};
    use std::sync::OnceLock;

    /// Every outcome the layer counts (see the module docs of `http`).
    const OUTCOMES: [&str; 15] = [
        "executed",
        "executed_not_kept",
        "executed_not_stored",
        "replay",
        "in_progress",
        "mismatch",
        "quota_exceeded",
        "refused",
        "store_unavailable",
        "handler_failed",
        "response_too_large",
        "unkeyed",
        "resource_locked",
        "precondition_failed",
        "accepted",
    ];

    /// The statuses whose keys are kept: the standard range, and `error`
    /// (no status: the handler's error) after it. An answer of another
    /// status (a handler's 7xx) makes its key each time.
    const STATUSES: std::ops::RangeInclusive<u16> = 100..=599;
    const STATUS_COUNT: usize = 500;
    const ERROR: usize = STATUS_COUNT;

    /// The three digits of every status of [`STATUSES`], one after the other.
    static DIGITS: [u8; 3 * STATUS_COUNT] = digits();

    const fn digits() -> [u8; 3 * STATUS_COUNT] {
        let mut digits = [0u8; 3 * STATUS_COUNT];
        let mut index = 0;
        while index < STATUS_COUNT {
            #[expect(clippy::cast_possible_truncation, reason = "below 600")]
            let status = (index + 100) as u16;
            #[expect(clippy::cast_possible_truncation, reason = "one digit")]
            {
                digits[3 * index] = b'0' + (status / 100) as u8;
                digits[3 * index + 1] = b'0' + (status / 10 % 10) as u8;
                digits[3 * index + 2] = b'0' + (status % 10) as u8;
            }
            index += 1;
        }
        digits
    }

    /// The key of each outcome and status, made at the first answer that
    /// carries them: at most one per pair, for the life of the process.
    static KEYS: [[OnceLock<&'static Key>; STATUS_COUNT + 1]; OUTCOMES.len()] =
        [const { [const { OnceLock::new() }; STATUS_COUNT + 1] }; OUTCOMES.len()];

    static METADATA: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

    pub(super) fn count(outcome: &'static str, status: Option<http::StatusCode>) {
        let column = match status {
            None => Some(ERROR),
            Some(status) => {
                let code = status.as_u16();
                STATUSES.contains(&code).then(|| usize::from(code - STATUSES.start()))
            }
        };
        let Some((row, column)) = OUTCOMES.iter().position(|known| *known == outcome).zip(column) else {
            // Not in the table: a key of its own, this once.
            let status = status.map_or_else(|| "error".to_owned(), |status| status.as_str().to_owned());
            let key =
                Key::from_parts(RESPONSES_TOTAL, vec![Label::new("outcome", outcome), Label::new("status", status)]);
            metrics::with_recorder(|recorder| recorder.register_counter(&key, &METADATA)).increment(1);
            return;
        };
        let key = KEYS[row][column].get_or_init(|| {
            let status = match DIGITS.get(3 * column..3 * column + 3) {
                Some(digits) => std::str::from_utf8(digits).unwrap_or("error"),
                None => "error",
            };
            let labels =
                vec![Label::from_static_parts("outcome", OUTCOMES[row]), Label::from_static_parts("status", status)];
            // Kept for the life of the process: one per pair, a bounded number.
            Box::leak(Box::new(Key::from_parts(RESPONSES_TOTAL, labels)))
        });
        metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA)).increment(1);
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_digits_are_the_statuses() {
            for code in [100u16, 200, 201, 404, 422, 599] {
                let index = usize::from(code - 100);
                assert_eq!(&DIGITS[3 * index..3 * index + 3], code.to_string().as_bytes());
            }
        }
    }
}
