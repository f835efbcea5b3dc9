//! Fuzzes `lab_model::expo::parse`, the reader of every scrape target's metrics text: whatever bytes a
//! target sends, the reader gives samples or an error naming a line of the input, and never panics.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A scrape body that is not UTF-8 never reaches the parser (the client decodes it first).
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines = text.split('\n').count();
    match lab_model::expo::parse(text) {
        Ok(samples) => {
            // At most one sample per line, each with a name that the format allows.
            assert!(
                samples.len() <= lines,
                "{} samples from {lines} lines",
                samples.len()
            );
            for s in &samples {
                let first = s.name.as_bytes().first().copied();
                assert!(
                    first.is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b':'),
                    "sample name {:?}",
                    s.name
                );
            }
        }
        Err(e) => {
            assert!(
                e.line >= 1 && e.line <= lines,
                "error on line {} of {lines}",
                e.line
            );
            // The message a scrape error shows must render.
            let _ = e.to_string();
        }
    }
});
