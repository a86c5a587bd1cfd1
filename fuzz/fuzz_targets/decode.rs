//! The frame decoder on arbitrary bytes: never panics; bytes that are not UTF-8 get
//! `NotUtf8`; whatever it accepts encodes and decodes back to the same event.
#![no_main]

use crewline_protocol::{DecodeError, decode, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match decode(data) {
        Ok(event) => {
            let again = decode(&encode(&event)).expect("an accepted event re-decodes");
            assert_eq!(again, event, "the round trip changed the event");
        }
        Err(error) => {
            assert!(!error.kind().as_str().is_empty());
            if std::str::from_utf8(data).is_err() {
                assert_eq!(error, DecodeError::NotUtf8);
            }
        }
    }
});
