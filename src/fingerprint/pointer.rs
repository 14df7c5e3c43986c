//! JSON Pointers (RFC 6901): which member or element of a document a
//! fingerprint includes or leaves out.

use super::json::Value;
use std::fmt;

/// A JSON Pointer (RFC 6901): `""` is the whole document, `/amount` its
/// member `amount`, `/items/0/price` the price of its first item; `~1`
/// stands for `/` and `~0` for `~` in a name.
///
/// # Examples
///
/// ```
/// use idemkv::fingerprint::JsonPointer;
///
/// let pointer = JsonPointer::parse("/payee/a~1b").expect("a pointer");
/// assert_eq!(pointer.tokens(), ["payee", "a/b"]);
/// assert!(JsonPointer::parse("amount").is_err(), "a pointer starts with /");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JsonPointer {
    text: String,
    tokens: Vec<String>,
}

/// A pointer that is not one (RFC 6901 §3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{pointer:?} is not a JSON Pointer: {reason}")]
pub struct PointerError {
    pointer: String,
    reason: &'static str,
}

impl PointerError {
    /// The text given.
    #[must_use]
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// Why it is not a pointer.
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        self.reason
    }
}

impl JsonPointer {
    /// Reads `text` as a JSON Pointer.
    ///
    /// # Errors
    /// [`PointerError`] when `text` is neither empty nor starts with `/`
    /// (the URI fragment form, `#/amount`, is not read), or has a `~` not
    /// followed by `0` or `1`.
    pub fn parse(text: &str) -> Result<JsonPointer, PointerError> {
        let refused = |reason| PointerError { pointer: text.to_owned(), reason };
        if text.is_empty() {
            return Ok(JsonPointer { text: String::new(), tokens: Vec::new() });
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(refused("it must be empty or start with /"));
        };
        let tokens = rest.split('/').map(unescape).collect::<Option<Vec<_>>>();
        let tokens = tokens.ok_or_else(|| refused("a ~ must be followed by 0 or 1"))?;
        Ok(JsonPointer { text: text.to_owned(), tokens })
    }

    /// The pointer as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its reference tokens, unescaped: a member's name or an array
    /// index each.
    #[must_use]
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// The value it points at in `document`, `None` when there is none.
    pub(super) fn find<'a>(&self, document: &'a Value) -> Option<&'a Value> {
        self.tokens.iter().try_fold(document, |value, token| child(value, token))
    }

    /// Leaves out of `document` what it points at: an object's member is
    /// removed, an array's element marked [`Value::Excluded`] in its
    /// place, the whole document marked so too. Nothing when it points
    /// at nothing.
    pub(super) fn exclude(&self, document: &mut Value) {
        let Some((last, parents)) = self.tokens.split_last() else {
            *document = Value::Excluded;
            return;
        };
        let mut value = document;
        for token in parents {
            let Some(next) = child_mut(value, token) else { return };
            value = next;
        }
        match value {
            Value::Object(members) => {
                if let Ok(at) = members.binary_search_by(|(name, _)| name.as_str().cmp(last)) {
                    members.remove(at);
                }
            }
            Value::Array(items) => {
                if let Some(item) = index(last).and_then(|at| items.get_mut(at)) {
                    *item = Value::Excluded;
                }
            }
            _ => {}
        }
    }
}

impl fmt::Display for JsonPointer {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.text)
    }
}

/// A reference token unescaped: `~1` is `/`, `~0` is `~`; `None` for any
/// other `~`.
fn unescape(token: &str) -> Option<String> {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(char) = chars.next() {
        match char {
            '~' => match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return None,
            },
            other => out.push(other),
        }
    }
    Some(out)
}

/// An array index token: `0`, or digits without a leading zero (so `-`,
/// the element after the last, and `01` name none).
fn index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|byte| byte.is_ascii_digit());
    if !digits || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}

fn child<'a>(value: &'a Value, token: &str) -> Option<&'a Value> {
    match value {
        Value::Object(members) => {
            let at = members.binary_search_by(|(name, _)| name.as_str().cmp(token)).ok()?;
            members.get(at).map(|(_, value)| value)
        }
        Value::Array(items) => items.get(index(token)?),
        _ => None,
    }
}

fn child_mut<'a>(value: &'a mut Value, token: &str) -> Option<&'a mut Value> {
    match value {
        Value::Object(members) => {
            let at = members.binary_search_by(|(name, _)| name.as_str().cmp(token)).ok()?;
            members.get_mut(at).map(|(_, value)| value)
        }
        Value::Array(items) => items.get_mut(index(token)?),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document() -> Value {
        Value::parse(br#"{"a/b":1,"m~n":2,"items":[{"price":3},{"price":4}],"":5}"#).expect("JSON")
    }

    fn found(pointer: &str) -> Option<String> {
        JsonPointer::parse(pointer).expect("pointer").find(&document()).map(Value::canonical)
    }

    #[test]
    fn pointers_find_what_rfc_6901_says() {
        assert_eq!(found("/a~1b").as_deref(), Some("1"));
        assert_eq!(found("/m~0n").as_deref(), Some("2"));
        assert_eq!(found("/items/1/price").as_deref(), Some("4"));
        assert_eq!(found("/").as_deref(), Some("5"), "the member named by the empty string");
        assert_eq!(found("").map(|text| text.len()), Some(document().canonical().len()));
        for nothing in ["/items/2", "/items/-", "/items/01", "/items/x", "/nope", "/a~1b/c"] {
            assert_eq!(found(nothing), None, "{nothing}");
        }
    }

    #[test]
    fn malformed_pointers_are_refused() {
        for bad in ["a", "#/a", "/a~", "/a~2"] {
            assert!(JsonPointer::parse(bad).is_err(), "{bad}");
        }
        let error = JsonPointer::parse("amount").expect_err("no slash");
        assert_eq!((error.pointer(), error.reason()), ("amount", "it must be empty or start with /"));
    }

    #[test]
    fn excluded_members_go_and_excluded_elements_keep_their_place() {
        let mut value = document();
        for pointer in ["/a~1b", "/items/0", "/missing/deeper", "/items/9"] {
            JsonPointer::parse(pointer).expect("pointer").exclude(&mut value);
        }
        assert_eq!(value.canonical(), r#"{"":5,"items":[~,{"price":4}],"m~n":2}"#);
        JsonPointer::parse("").expect("pointer").exclude(&mut value);
        assert_eq!(value, Value::Excluded);
    }
}
