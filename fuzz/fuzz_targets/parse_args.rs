//! Size, mode, backend, compression, time, owner and tar numeric-field parsing on arbitrary
//! input: no panics, and what a size parses to is what its digits say.
#![no_main]

use cacheless::{BackendKind, Mode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cacheless_archive::tarparse::parse_numeric(data);
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(n) = cacheless::parse_size(s) {
        let t = s.trim();
        // A plain integer (bytes) is exact, however large.
        if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            assert_eq!(Some(n), t.parse::<u64>().ok(), "parse_size({s:?})");
        }
    }
    let _ = s.parse::<Mode>();
    let _ = s.parse::<BackendKind>();
    let _ = s.parse::<cacheless::digest::Algo>();
    let _ = cacheless_archive::pack::parse_compression(s);
    let _ = cacheless_archive::pack::parse_time(s);
    let _ = cacheless_archive::pack::Owner::parse(s, false);
});
