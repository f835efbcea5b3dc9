//! Fuzzes `lab_drill_file::spec::parse`, the reader of drill files: whatever text it is given, it returns a
//! checked drill or an error with a 1-based line and column, and never panics or hangs.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match lab_drill_file::spec::parse(text) {
        Ok(drill) => {
            assert!(!drill.name.is_empty(), "a drill without a name was accepted");
            assert!(!drill.steps.is_empty(), "a drill without steps was accepted");
            // Reports embed the drill as JSON: that must always serialise.
            serde_json::to_string(&drill).expect("a parsed drill serialises");
        }
        Err(e) => {
            assert!(e.line >= 1 && e.column >= 1, "position {}:{}", e.line, e.column);
            assert!(!e.message.is_empty(), "an error without a message");
        }
    }
});
