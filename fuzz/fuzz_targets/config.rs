//! The TOML config: any text is either a config or an error naming the file (and never a panic).
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Config::from_toml(text, std::path::Path::new("fuzz.toml")) {
        Ok(c) => assert!(c.validate().is_empty()),
        Err(e) => assert!(e.to_string().starts_with("fuzz.toml:"), "{e}"),
    }
});
