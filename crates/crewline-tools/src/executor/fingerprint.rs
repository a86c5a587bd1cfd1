//! The canonical form of a call's arguments, and its hash: what the cache, approvals and the
//! in-flight table compare calls by.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The SHA-256 of the canonical JSON of `arguments`, in hex: equal for equal arguments
/// whatever their key order, and not forgeable (an approval bound to it cannot be reused for
/// other arguments).
pub(crate) fn arguments_hash(arguments: &Value) -> String {
    let mut text = String::with_capacity(64);
    canonical(arguments, &mut text);
    let digest = Sha256::digest(text.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in digest.iter() {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    hex
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Writes `value` as JSON with object keys sorted (the maps keep insertion order otherwise).
pub(crate) fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(inner) = map.get(key) {
                    canonical(inner, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hashes_ignore_key_order_and_differ_for_other_arguments() {
        let a = arguments_hash(&json!({"amount": 50, "to": "alice"}));
        assert_eq!(a, arguments_hash(&json!({"to": "alice", "amount": 50})));
        assert_ne!(a, arguments_hash(&json!({"to": "alice", "amount": 500})));
        assert_eq!(a.len(), 64);
    }
}
