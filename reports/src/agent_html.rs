//! The agent plans' table of the HTML report: what each plan concluded, its commands as decided, and
//! its four scores.

use std::fmt::Write as _;

use crate::escape::esc;
use crate::report::DrillReport;

/// With `--agent`: each plan, what it concluded, its commands as decided, and its score.
pub(crate) fn plans(o: &mut String, d: &DrillReport) {
    let plans: Vec<_> = d.remediations.iter().filter_map(|r| r.agent.as_ref()).collect();
    if plans.is_empty() {
        return;
    }
    o.push_str("<h3>Agent plans</h3>\n<table class=\"agent\">\n<thead><tr><th>#</th><th>evidence</th><th>concluded</th><th>commands</th><th>detection</th><th>localization</th><th>cause</th><th>mitigation</th></tr></thead>\n<tbody>\n");
    for (i, a) in plans.iter().enumerate() {
        let concluded = match &a.plan {
            Some(p) => format!(
                "anomaly {} · blames {} · {}",
                if p.anomaly { "yes" } else { "no" },
                esc(&p.blame.join(", ")),
                esc(&p.cause)
            ),
            None => esc(a.problem.as_deref().unwrap_or("no plan")),
        };
        let cmds: Vec<String> = a
            .commands
            .iter()
            .map(|c| {
                let mark = if !c.approved {
                    "declined"
                } else if c.exit_code == Some(0) {
                    "ran"
                } else {
                    "failed"
                };
                format!("<code>{}</code> ({mark})", esc(&c.argv.join(" ")))
            })
            .collect();
        let (det, loc, cause, mit) = match &a.score {
            Some(s) => (
                if s.detection { "right" } else { "wrong" }.to_string(),
                format!(
                    "precision {} · recall {:.2}",
                    s.precision.map_or("-".into(), |p| format!("{p:.2}")),
                    s.recall
                ),
                format!(
                    "{} ({})",
                    if s.cause { "right" } else { "wrong" },
                    esc(&s.cause_named)
                ),
                format!("{:?}", s.mitigation).to_lowercase(),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let at = a
            .plan_at_s
            .map_or(String::new(), |t| format!(" · plan at +{t:.1} s"));
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{concluded}{at}</td><td>{}</td><td>{det}</td><td>{loc}</td><td>{cause}</td><td>{mit}</td></tr>",
            i + 1,
            a.evidence,
            if cmds.is_empty() {
                "none".to_string()
            } else {
                cmds.join("<br>")
            }
        );
    }
    o.push_str("</tbody>\n</table>\n");
}
