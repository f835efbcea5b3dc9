//! What a bundle may say: a detail that would name the injection rather than show evidence is left out,
//! so an agent under test reads what a real system would show, never the answer.

/// Words that would name an injection rather than show evidence; a detail carrying one is left out.
const TELLING: [&str; 4] = ["fault", "inject", "cleared", "drill"];

/// `s`, unless it carries a word that names an injection.
pub fn evidence_only(s: &str) -> Option<String> {
    let l = s.to_lowercase();
    (!TELLING.iter().any(|w| l.contains(w))).then(|| s.to_string())
}
